"""A running sandbox's hostname, set from the node (a sandbox started ahead for the warm pool
gets its name when it is claimed: sandboxes/warm_pool.py).

The hostname belongs to the sandbox's UTS namespace, owned by its user namespace, in which
the sandbox's processes lack CAP_SYS_ADMIN: only the node can change it. ``setns(2)`` into a
UTS namespace moves just the calling thread, so this runs in a fresh thread that ends after
(no pooled thread is left in a sandbox's namespace).
"""

import ctypes
import ctypes.util
import os
import socket
import threading

CLONE_NEWUTS = 0x04000000
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWUTS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWUTS): {os.strerror(err)}")


def set_hostname(pid: int, name: str) -> None:
    """sethostname(name) in the UTS namespace of process ``pid``."""
    errors: list[BaseException] = []

    def body() -> None:
        try:
            target = os.open(f"/proc/{pid}/ns/uts", os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(target)
            finally:
                os.close(target)
            socket.sethostname(name)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=body, name=f"uts-{pid}", daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
