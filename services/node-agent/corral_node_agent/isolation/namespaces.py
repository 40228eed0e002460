"""Running a call inside one namespace of a sandbox's process, from the node-agent.

``setns(2)`` into a network or UTS namespace moves just the calling thread, so each call runs
in a fresh thread that enters the namespace, calls, and ends: no pooled thread (nor the event
loop's) is ever left in a sandbox's namespace.
"""

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
CLONE_NEWUTS = 0x04000000
_NAMES = {CLONE_NEWNET: "net", CLONE_NEWUTS: "uts"}
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def enter(fd: int, nstype: int) -> None:
    """Move the calling thread into the namespace of ``fd``."""
    if _libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns({_NAMES[nstype]}): {os.strerror(err)}")


def run_in(pid: int, nstype: int, fn: Callable[[], T]) -> T:
    """``fn()`` in the ``nstype`` namespace (CLONE_NEWNET, CLONE_NEWUTS) of process ``pid``."""
    result: list = []

    def body() -> None:
        try:
            target = os.open(f"/proc/{pid}/ns/{_NAMES[nstype]}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                enter(target, nstype)
            finally:
                os.close(target)
            result.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            result.append((False, exc))

    thread = threading.Thread(target=body, name=f"{_NAMES[nstype]}ns-{pid}", daemon=True)
    thread.start()
    thread.join()
    ok, value = result[0]
    if not ok:
        raise value
    return value
