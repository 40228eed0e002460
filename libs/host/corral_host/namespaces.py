"""Entering namespaces: this process's private mount namespace, and a call run inside one
namespace of another process.

Two ways to run code in another namespace, and this module's ``run_in`` is the first:

- a fresh thread per call (``run_in``): ``setns(2)`` into a network or UTS namespace moves
  just the calling thread, so each call runs in a thread that enters the namespace, calls, and
  ends: no pooled thread (nor the event loop's) is ever left in a sandbox's namespace;
- one long-lived worker thread (``netns.NetnsWorker``) for the node's own network namespaces,
  which it makes, configures and steps back out of, job after job.

The mount namespace is a property of the whole process instead: ``enter_private_mount_namespace``
runs once, first thing, while the process is single-threaded.
"""

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from corral_host import mounts
from corral_host.cgroups.mounts import CGROUP_UNIFIED

T = TypeVar("T")

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWUTS = 0x04000000
_NAMES = {CLONE_NEWNS: "mnt", CLONE_NEWNET: "net", CLONE_NEWUTS: "uts"}
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_original_namespace: int | None = None


def enter(fd: int, nstype: int) -> None:
    """Move the calling thread into the namespace of ``fd``."""
    if _libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns({_NAMES[nstype]}): {os.strerror(err)}")


def unshare(nstype: int) -> None:
    """Move the calling thread into a fresh namespace of type ``nstype``."""
    if _libc.unshare(nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare({_NAMES[nstype]}): {os.strerror(err)}")


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


def enter_private_mount_namespace() -> None:
    """Give this process its own mount namespace, shaped the way crun needs it.

    Must run while the process is single-threaded (unshare(CLONE_NEWNS) fails with EINVAL
    otherwise): call it first thing in main, or at test-session import time.

    - rslave: host mounts still propagate in, but our sandbox/layer mounts never leak out,
      and they all vanish with the process (no stale mounts on the host after a crash).
    - crun 1.8 refuses the hybrid cgroup layout; hiding the cgroup2 mount at
      /sys/fs/cgroup/unified makes it a plain v1 host for crun.
    """
    global _original_namespace
    if _original_namespace is None:
        # Kept for the processes that must outlive us without pinning our namespace (the
        # lazy-layer server: ``layers.lazy.server_main``).
        _original_namespace = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    private_mount_namespace()
    if mounts.is_mountpoint(CGROUP_UNIFIED):
        mounts.umount(CGROUP_UNIFIED, lazy=True)


def private_mount_namespace(parent_fd: int | None = None) -> None:
    """Move this (single-threaded) process into a new mount namespace, rslave: copied from
    the namespace ``parent_fd`` names (else from the current one)."""
    if parent_fd is not None:
        enter(parent_fd, CLONE_NEWNS)
    unshare(CLONE_NEWNS)
    mounts.make_rslave("/")


def original_mount_namespace() -> int | None:
    """A descriptor of the mount namespace this process started in, before
    ``enter_private_mount_namespace`` (None: it never left it)."""
    return _original_namespace
