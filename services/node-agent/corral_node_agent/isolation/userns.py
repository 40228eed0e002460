"""Who sandboxed code runs as, inside the sandbox and on the host.

- containers: a user namespace of their own per sandbox. Each sandbox gets 65,536 host
  uids/gids (`IdRange`, from the node's `UidRanges`) mapped to 0..65535 inside: root inside
  is the range's base on the host, the sandbox user (``sandbox_user``, default 1000) is
  base + 1000, and no two live sandboxes share a host id, so per-uid kernel state (user
  keyrings, inotify instances, RLIMIT_NPROC, mqueue bytes) is per sandbox. An exec as
  ``root`` is root of that namespace with `ROOT_CAPABILITIES`, which count only there.
  ``container_uid_base: -1`` turns this off (every sandbox is host ``sandbox_user``, root is
  host root: the old behaviour, kept for kernels without idmapped layers and for benchmarks).
- fncall runs: uid/gid 1000 inside bwrap's user namespace, ``nobody`` (65534) on the host;
- VMs: every QEMU drops to a host uid of its own (`VmUidPool`): a guest that escapes into
  QEMU lands in an unprivileged user that is neither root nor another VM's.

The namespace itself is made fresh for each sandbox (`UserNamespace`: a fork of a small
helper process, userns_helper.py), owned by the range's root, and crun joins it. Not by crun (it would be owned by host root,
and the kernel charges per-user counts such as inotify instances to the owner as well: all
sandboxes and host root would share one budget of 128), and never reused (it holds the user
keyrings).

Files of the image keep their ids: the container backend mounts each layer as an idmapped
clone through that namespace (mount_api.py), so a file owned by 0 on the image is owned by
the range's base on the host and by root inside. The writable upper is not idmapped (an
overlay over an idmapped upper fails: overlay makes its work dir as host root, EOVERFLOW)
but a plain directory chowned to the range's root: overlay copies up as host root, keeping
the idmapped owner. A host uid outside the range shows as 65534 inside and is out of reach
of root's capabilities there.

Ranges are claimed in a host-wide registry (``uid_registry_dir``, one file per range under a
lock), so two agents on one host never hand out the same ids, whatever their node ids; the
node id only decides where an agent starts looking. A sandbox's range is written into its
bundle's sandbox.json: a restarted agent reads it back and claims the same range again
(`UidRanges.claim`). A claim left by a crashed agent is free again once its sandbox's
directory is gone (or the host rebooted).
"""

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from corral_node_agent.errors import Unavailable
from corral_node_agent.settings import NodeAgentSettings

# What a `user: root` exec gets in a container (docker-like, minus anything touching the
# host); the sandbox user gets none.
ROOT_CAPABILITIES = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
    "CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE",
)
NOBODY = 65534
VM_UID_SLOTS = 10_000
RANGE_SIZE = 65536
# Derived container ranges: host ids [2^28, 2^31), far above VM uids (< 12,000,000) and the
# usual /etc/subuid ranges, below 2^31 (tools that keep ids signed).
DERIVED_FIRST = 1 << 28
DERIVED_RANGES = ((1 << 31) - DERIVED_FIRST) // RANGE_SIZE
# A claim whose sandbox directory does not exist yet is being created: not stale before this.
CLAIM_GRACE_S = 60.0
# How long a range seen held by another live sandbox (another agent's) is skipped without looking
# at its claim file again. Two agents' derived starts may lie close (node-1 and node-2: 390 ranges
# apart), so one agent's walk crosses the other's claims; checking each claim's file on every
# acquire made each create O(sandboxes on the host) in syscalls, on the agent's event loop and
# under the host-wide lock: at ~2,300 sandboxes per node a node-agent's heartbeat went 10 s late.
FOREIGN_RECHECK_S = 30.0


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


@dataclass(frozen=True)
class Identity:
    uid: int  # the sandbox user, as the sandbox sees it
    gid: int
    # The same processes as the host sees them; None: a uid of its own per sandbox, from the
    # node's pool (VMs: `VmUidPool`).
    host_uid: int | None
    host_gid: int | None
    root_capabilities: tuple[str, ...] = ()  # what an exec as root keeps (containers)
    # Containers: the user namespace's mapping (None: no user namespace, host ids as above).
    ids: IdRange | None = None

    @property
    def host_root(self) -> tuple[int, int]:
        """Root of the sandbox as the host sees it (host root without a user namespace)."""
        return (self.ids.host_base,) * 2 if self.ids else (0, 0)


FNCALL_IDENTITY = Identity(uid=1000, gid=1000, host_uid=NOBODY, host_gid=NOBODY)
# The guest agent runs commands as 1000:1000 inside the guest (guest/agent.c).
VM_IDENTITY = Identity(uid=1000, gid=1000, host_uid=None, host_gid=None)


def container_identity(settings: NodeAgentSettings, ids: IdRange | None = None, run_as: str | None = None) -> Identity:
    """The sandbox user: ``run_as`` ("uid[:gid]", an image's User) inside a user namespace of
    its own, where any id of the range is only the range's; without one (host ids) always
    the node's sandbox uid, never an id a caller picked (0 would be host root)."""
    uid, gid = settings.sandbox_uid, settings.sandbox_gid
    if ids is not None and run_as:
        parts = [int(part) for part in run_as.split(":")]
        if all(0 <= part < ids.size for part in parts):
            uid = parts[0]
            gid = parts[1] if len(parts) > 1 else parts[0]
    if ids is None:
        return Identity(uid=uid, gid=gid, host_uid=uid, host_gid=gid, root_capabilities=ROOT_CAPABILITIES)
    return Identity(uid=uid, gid=gid, host_uid=ids.host(uid), host_gid=ids.host(gid),
                    root_capabilities=ROOT_CAPABILITIES, ids=ids)


def vm_uid_base(settings: NodeAgentSettings) -> int:
    """The first QEMU uid (-1: QEMU stays root)."""
    base = settings.vm_uid_base
    if base == 0:
        base = 2_000_000 + (zlib.crc32(settings.node_id.encode()) % 1000) * VM_UID_SLOTS
    return base


class VmUidPool:
    """Host uids for QEMU processes: ``vm_uid_base`` + a slot, one slot per running VM.

    A base of 0 derives one from the node id, so two agents on one host do not share uids;
    -1 keeps QEMU as root (no slots are handed out)."""

    def __init__(self, settings: NodeAgentSettings):
        self.base = vm_uid_base(settings)
        self.enabled = settings.vm_uid_base >= 0
        self._free = list(range(VM_UID_SLOTS - 1, -1, -1))

    def acquire(self) -> int | None:
        """A free slot, lowest first (None: QEMU stays root, disabled or all slots taken)."""
        return self._free.pop() if self.enabled and self._free else None

    def claim(self, slot: int) -> None:
        """Take the slot a VM adopted from a previous agent run already uses."""
        if slot in self._free:
            self._free.remove(slot)

    def release(self, slot: int) -> None:
        self._free.append(slot)

    def uid(self, slot: int) -> int:
        return self.base + slot


def _boot_id() -> str:
    with open("/proc/sys/kernel/random/boot_id") as fh:
        return fh.read().strip()


def id_range_count(settings: NodeAgentSettings) -> int | None:
    """How many sandboxes' id ranges the node can hand out (None: no user namespaces, no bound)."""
    base = settings.container_uid_base
    if base < 0:
        return None
    if base == 0:
        return DERIVED_RANGES
    return settings.max_sandboxes or max(0, ((1 << 32) - base) // RANGE_SIZE)


class UidRanges:
    """The node's container id ranges: `acquire` one per sandbox, `release` it on delete.

    ``container_uid_base`` > 0: ranges ``base + i * 65536`` for i < ``max_sandboxes`` (0: up to 2^32);
    0: ranges in [2^28, 2^31), this node starting at a place derived from its node id;
    -1: disabled (`enabled` False, sandboxes get no user namespace)."""

    def __init__(self, settings: NodeAgentSettings):
        base = settings.container_uid_base
        self.enabled = base >= 0
        self.node_id = settings.node_id
        if base == 0:
            self.first, self.count = DERIVED_FIRST, DERIVED_RANGES
            self.start = zlib.crc32(settings.node_id.encode()) % DERIVED_RANGES
        else:
            self.first, self.count, self.start = base, id_range_count(settings) or 0, 0
        if self.enabled:
            if settings.sandbox_uid >= RANGE_SIZE or settings.sandbox_gid >= RANGE_SIZE:
                raise ValueError(f"sandbox_user must be below {RANGE_SIZE} with user namespaces")
            vm = vm_uid_base(settings)
            if settings.vm_uid_base >= 0 and vm < self.first + self.count * RANGE_SIZE and self.first < vm + VM_UID_SLOTS:
                raise ValueError(f"container uid ranges [{self.first}, {self.first + self.count * RANGE_SIZE}) "
                                 f"overlap the VM uids [{vm}, {vm + VM_UID_SLOTS}): change container_uid_base")
            if self.first + self.count * RANGE_SIZE > 1 << 32:
                raise ValueError("container_uid_base leaves no room for max_sandboxes ranges below 2^32")
        self.registry = settings.uid_registry_dir
        self._held: dict[int, str] = {}  # host_base -> owner (the sandbox's directory)
        self._foreign: dict[int, float] = {}  # host_base -> when it was last seen held by another
        self._boot = ""

    # ---- the registry -------------------------------------------------------------------

    def _claim_path(self, host_base: int) -> str:
        return f"{self.registry}/{host_base}"

    def _locked(self):
        os.makedirs(self.registry, mode=0o700, exist_ok=True)
        fd = os.open(f"{self.registry}/.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return os.fdopen(fd, "r+")  # closing it releases the lock

    def _write_claim(self, host_base: int, owner: str, *, replace: bool) -> bool:
        """Create the claim file (False: someone else's live claim is there)."""
        path = self._claim_path(host_base)
        if not self._boot:
            self._boot = _boot_id()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            if not replace and not self._stale(path, owner):
                return False
            os.unlink(path)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{self._boot}\n{self.node_id}\n{owner}\n")
        return True

    def _stale(self, path: str, owner: str) -> bool:
        """A claim of a previous boot, or of a sandbox directory that is gone (or ours)."""
        try:
            with open(path) as fh:
                boot, _node, held_by = (fh.read().split("\n") + ["", "", ""])[:3]
            age = time.time() - os.stat(path).st_mtime
        except OSError:
            return True
        if boot != self._boot or held_by == owner:
            return True
        return not os.path.exists(held_by) and age > CLAIM_GRACE_S

    # ---- ranges -------------------------------------------------------------------------

    def acquire(self, owner: str) -> IdRange:
        """A free range for the sandbox in directory ``owner`` (Unavailable when none is)."""
        now = time.monotonic()
        with self._locked():
            for recheck in (False, True):  # a second walk looks again at every claim of another
                for k in range(self.count):
                    i = (self.start + k) % self.count
                    host_base = self.first + i * RANGE_SIZE
                    if host_base in self._held:
                        continue
                    if not recheck and now - self._foreign.get(host_base, -FOREIGN_RECHECK_S) < FOREIGN_RECHECK_S:
                        continue
                    if self._write_claim(host_base, owner, replace=False):
                        self._foreign.pop(host_base, None)
                        self._held[host_base] = owner
                        return IdRange(host_base)
                    self._foreign[host_base] = now
        raise Unavailable(f"no free uid range on this node (all {self.count} are in use)")

    def claim(self, ids: IdRange, owner: str) -> None:
        """Hold again the range an adopted sandbox runs with (its bundle says which)."""
        with self._locked():
            self._write_claim(ids.host_base, owner, replace=True)
        self._held[ids.host_base] = owner

    def release(self, ids: IdRange) -> None:
        if self._held.pop(ids.host_base, None) is None:
            return
        try:
            os.unlink(self._claim_path(ids.host_base))
        except FileNotFoundError:
            pass

    def release_unheld(self, owners_under: str) -> None:
        """Drop claims of sandbox directories below ``owners_under`` that this agent does not
        hold (a previous run's, whose sandboxes were not adopted)."""
        if not os.path.isdir(self.registry):
            return
        prefix = owners_under.rstrip("/") + "/"
        with self._locked():
            for name in os.listdir(self.registry):
                if not name.isdigit() or int(name) in self._held:
                    continue
                try:
                    with open(self._claim_path(int(name))) as fh:
                        held_by = (fh.read().split("\n") + ["", "", ""])[2]
                    if held_by.startswith(prefix):
                        os.unlink(self._claim_path(int(name)))
                except OSError:
                    continue


class UserNamespace:
    """A fresh user namespace mapping 0..size-1 to a range, owned by the range's root: for
    one sandbox's idmapped layers (`fd`) and for crun to join (`path`, valid until `close`).

    A process of the helper (userns_helper.py) makes it as the range's root, and we (root
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
    """The agent's one userns_helper.py process, started on first use (and again if it died)."""

    SOURCE = Path(__file__).with_name("userns_helper.py")

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
