"""Network namespaces by file, made and entered per thread.

A network namespace is a property of a thread, not of a process: a thread that calls
unshare(CLONE_NEWNET) or setns() moves alone, and a netlink socket stays in the namespace
it was made in. So one worker thread (`NetnsWorker`) does all namespace work of the agent:
it makes a namespace, configures it through sockets opened there, and steps back, while the
event loop and every other thread stay in the node's namespace. A namespace outlives its
thread as long as a file is bind-mounted onto it (`bind`) or a process is inside.
"""

import concurrent.futures
import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable
from contextlib import contextmanager
from typing import TypeVar

CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MNT_DETACH = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
T = TypeVar("T")


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def current_fd() -> int:
    """An fd of the calling thread's network namespace."""
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


def enter(fd: int) -> None:
    """Move the calling thread into the namespace of ``fd``."""
    _check(_libc.setns(fd, CLONE_NEWNET), "setns(CLONE_NEWNET)")


def unshare() -> None:
    """Move the calling thread into a fresh, empty network namespace."""
    _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")


def bind(path: str) -> None:
    """Keep the calling thread's namespace alive as the file ``path``."""
    with open(path, "w"):
        pass
    _check(_libc.mount(b"/proc/thread-self/ns/net", path.encode(), None, MS_BIND, None), f"bind {path}")


def unbind(path: str) -> None:
    """Let go of a namespace file (the namespace ends when nothing else holds it)."""
    _libc.umount2(path.encode(), MNT_DETACH)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


@contextmanager
def inside(fd: int, home: int):
    """The calling thread in ``fd``'s namespace for the block, back in ``home``'s after."""
    enter(fd)
    try:
        yield
    finally:
        enter(home)


class NetnsWorker:
    """The agent's one thread for namespace work (see the module's docstring)."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="netns")
        self.home = current_fd()  # the node's namespace (taken on the caller's thread)
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., T], *args) -> concurrent.futures.Future[T]:
        return self._pool.submit(self._run, fn, *args)

    def _run(self, fn: Callable[..., T], *args) -> T:
        try:
            return fn(*args)
        finally:
            enter(self.home)  # whatever fn did, the worker is back home for the next job

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        os.close(self.home)
