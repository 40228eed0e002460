"""Network namespaces: the node's own, by file, made and entered by one worker thread; and a
sandbox's, reached for port ingress by sockets made inside it.

A network namespace is a property of a thread, not of a process: a thread that calls
unshare(CLONE_NEWNET) or setns() moves alone, and a netlink socket stays in the namespace
it was made in. So one worker thread (`NetnsWorker`) does all of the agent's work on the
namespaces it makes (the egress namespace and one per sandbox slot): it makes a namespace,
configures it through sockets opened there, and steps back, while the event loop and every
other thread stay in the node's namespace. A namespace outlives its thread as long as a file
is bind-mounted onto it (`bind`) or a process is inside.

A sandbox's netns has no route out: the only way to its ports is a socket *made inside* that
namespace (`tcp_socket`: a fresh thread enters it, namespaces.run_in), which stays bound to the
namespace it was created in. The loopback interface is brought up at start (IPv4 only), so
software in the sandbox can listen on 127.0.0.1 (the namespace still has no other interface and
no route: nothing leaves it).
"""

import concurrent.futures
import ctypes
import ctypes.util
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable
from contextlib import contextmanager
from typing import TypeVar

from corral_host import namespaces
from corral_host.namespaces import CLONE_NEWNET

MS_BIND = 4096
MNT_DETACH = 2
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1

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
    """Move the calling thread into the network namespace of ``fd``."""
    namespaces.enter(fd, CLONE_NEWNET)


def unshare() -> None:
    """Move the calling thread into a fresh, empty network namespace."""
    namespaces.unshare(CLONE_NEWNET)


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


# ---- a sandbox's namespace, for port ingress (a fresh thread per call) --------------------


def run_in_netns(pid: int, fn: Callable[[], T]) -> T:
    """``fn()`` in the network namespace of process ``pid`` (a fresh thread, which ends)."""
    return namespaces.run_in(pid, CLONE_NEWNET, fn)


def loopback_up_here() -> None:
    """Bring ``lo`` up in the calling thread's netns (idempotent)."""
    # IPv4 loopback only: without IPv6 on lo the namespace has no route at all (not even ::1).
    try:
        with open("/proc/sys/net/ipv6/conf/lo/disable_ipv6", "w") as fh:  # this thread's netns
            fh.write("1")
    except OSError:
        pass  # a kernel without IPv6
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, ifreq))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def loopback_up(pid: int) -> None:
    """Bring ``lo`` up in the netns of ``pid`` (idempotent)."""
    run_in_netns(pid, loopback_up_here)


def tcp_socket(pid: int) -> socket.socket:
    """A non-blocking TCP socket in the netns of ``pid``, to connect to 127.0.0.1 there."""
    sock = run_in_netns(pid, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    sock.setblocking(False)
    return sock
