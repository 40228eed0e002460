"""Fresh user namespaces, each mapping 0..size-1 to a range of host ids and owned by that
range's root.

The namespace is made fresh for each sandbox (`UserNamespace`: a fork of a small helper
program, userns_main.py), owned by the range's root, and crun joins it. Not by crun (it would
be owned by host root, and the kernel charges per-user counts such as inotify instances to the
owner as well: all sandboxes and host root would share one budget of 128), and never reused
(it holds the user keyrings).

Files of the image keep their ids: the container backend mounts each layer as an idmapped
clone through that namespace (mount_api.py), so a file owned by 0 on the image is owned by
the range's base on the host and by root inside. The writable upper is not idmapped (an
overlay over an idmapped upper fails: overlay makes its work dir as host root, EOVERFLOW)
but a plain directory chowned to the range's root: overlay copies up as host root, keeping
the idmapped owner. A host uid outside the range shows as 65534 inside and is out of reach
of root's capabilities there.
"""

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

RANGE_SIZE = 65536


@dataclass(frozen=True)
class IdRange:
    """Host ids ``host_base .. host_base + size - 1``, seen inside as ``0 .. size - 1``."""

    host_base: int
    size: int = RANGE_SIZE

    def host(self, inside: int) -> int:
        return self.host_base + inside

    def to_json(self) -> dict[str, int]:
        return {"host_base": self.host_base, "size": self.size}

    @classmethod
    def from_json(cls, data: dict) -> "IdRange":
        return cls(host_base=int(data["host_base"]), size=int(data["size"]))


class UserNamespace:
    """A fresh user namespace mapping 0..size-1 to a range, owned by the range's root: for
    one sandbox's idmapped layers (`fd`) and for crun to join (`path`, valid until `close`).

    A process of the helper (userns_main.py) makes it as the range's root, and we (root
    in the parent namespace) write its maps. The owner matters: the kernel charges a
    namespace's per-user counts (inotify instances, user namespaces...) to its owner in the
    parent namespace too, so a namespace made by host root would share host root's 128
    inotify instances with every other sandbox and with the host. Never reused across
    sandboxes: a namespace holds its user keyrings."""

    def __init__(self, ids: IdRange):
        self.fd = -1
        pid = _HELPER.spawn(ids.host_base)
        self._pidfd = os.pidfd_open(pid)
        try:
            for name in ("uid_map", "gid_map"):
                with open(f"/proc/{pid}/{name}", "w") as fh:
                    fh.write(f"0 {ids.host_base} {ids.size}\n")
            self.path = f"/proc/{pid}/ns/user"
            self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Let it go: what joined it or was idmapped through it keeps it alive."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self._pidfd >= 0:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.close(self._pidfd)
            self._pidfd = -1

    def __enter__(self) -> "UserNamespace":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Helper:
    """The agent's one userns_main.py process, started on first use (and again if it died)."""

    SOURCE = Path(__file__).with_name("userns_main.py")

    def __init__(self):
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def spawn(self, uid: int) -> int:
        """The pid of a helper child that owns a fresh user namespace (no maps yet)."""
        with self._lock:
            for attempt in (1, 2):
                if self._proc is None or self._proc.poll() is not None:
                    self._proc = subprocess.Popen([sys.executable, "-S", str(self.SOURCE)], stdin=subprocess.PIPE,
                                                  stdout=subprocess.PIPE, text=True, bufsize=1)
                assert self._proc.stdin is not None and self._proc.stdout is not None
                try:
                    self._proc.stdin.write(f"{uid}\n")
                    self._proc.stdin.flush()
                    answer = self._proc.stdout.readline()
                except BrokenPipeError:
                    answer = ""
                if answer:
                    break
                self._proc.kill()  # died or mute: a new one, once
                self._proc.wait()
            pid = int(answer or "-5")
        if pid <= 0:
            raise OSError(-pid, f"cannot make a user namespace owned by {uid}: {os.strerror(-pid)}")
        return pid


_HELPER = _Helper()
