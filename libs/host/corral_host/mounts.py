"""mount(2) and umount2(2) via ctypes, and what this process's mount namespace holds.

The `mount` binary is avoided on purpose: for a file source it silently sets up a loop
device, while the kernel mounts EROFS straight from a file in well under a millisecond.
"""

import ctypes
import ctypes.util
import errno
import os
import shutil

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_MOVE = 8192
MS_BIND = 4096
MS_REC = 16384
MS_SLAVE = 1 << 19
MNT_DETACH = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _raise(path: str, what: str) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"{what}: {os.strerror(err)}", path)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    rc = _libc.mount(
        source.encode() if source is not None else None,
        target.encode(),
        fstype.encode() if fstype is not None else None,
        flags,
        data.encode() if data is not None else None,
    )
    if rc != 0:
        _raise(target, f"mount {fstype or ''} {source or ''}".strip())


def mountpoints() -> list[str]:
    """Mount points visible to this process (its own mount namespace)."""
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            # Field 5 is the mount point, with spaces etc. escaped as octal.
            raw = line.split()[4]
            points.append(raw.encode().decode("unicode_escape"))
    return points


def is_mountpoint(path: str) -> bool:
    return os.path.abspath(path) in mountpoints()


def make_rslave(target: str) -> None:
    """Mounts at and below ``target`` receive the mount events of the namespace this one was
    copied from, and send none back (MS_REC | MS_SLAVE)."""
    _mount(None, os.path.abspath(target), None, MS_REC | MS_SLAVE, None)


def mount_erofs(image: str, target: str) -> None:
    """EROFS straight from the file ``image``, named to the kernel by a descriptor: the source
    a mount shows in /proc/self/mountinfo is the string it was given, and a sandbox that sees
    this mount (fncall binds a layer as its root) must not read the node's paths there
    (``/proc/self/fd/N`` instead). O_PATH: nothing is opened twice (a FUSE file's server sees
    the kernel's one open)."""
    fd = os.open(image, os.O_PATH | os.O_CLOEXEC)
    try:
        _mount(f"/proc/self/fd/{fd}", os.path.abspath(target), "erofs", MS_RDONLY, None)
    finally:
        os.close(fd)


def mount_overlay(lowers: list[str], upper: str, work: str, target: str) -> None:
    """Overlay with `lowers` top-first (toolkit, workspace, base)."""
    if not lowers:
        raise OSError(errno.EINVAL, "overlay needs at least one lower dir", target)
    for p in [*lowers, upper, work]:
        if any(c in p for c in ",:\n"):
            # The option string has no escaping for these; refuse instead of mis-parsing.
            raise OSError(errno.EINVAL, "unsupported character in overlay path", p)
    opts = "lowerdir={},upperdir={},workdir={}".format(
        ":".join(os.path.abspath(p) for p in lowers), os.path.abspath(upper), os.path.abspath(work)
    )
    _mount("overlay", os.path.abspath(target), "overlay", 0, opts)


def move_mount(source: str, target: str) -> None:
    """Move the mount at source (with everything under it) to target."""
    _mount(os.path.abspath(source), os.path.abspath(target), None, MS_MOVE, None)


def bind_mount(source: str, target: str) -> None:
    """Make source's tree also appear at target (same filesystem, same mount flags)."""
    _mount(source, target, None, MS_BIND, None)


def mount_tmpfs(target: str, size_mb: int, mode: int = 0o755) -> None:
    _mount("tmpfs", os.path.abspath(target), "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(size_mb)}m,mode={mode:o}")


def mount_empty_readonly(target: str) -> None:
    """A read-only tmpfs with nothing in it (and room for nothing)."""
    _mount("tmpfs", os.path.abspath(target), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555")


def mount_copy_readonly(source: str, target: str, name: str) -> str:
    """A read-only tmpfs at ``target`` holding a copy of the file ``source`` (its mode kept) as
    ``name``, sized to it; returns the copy's path. Bound elsewhere, the copy shows in
    /proc/self/mountinfo as ``/<name>`` of a tmpfs, where a bind of ``source`` itself would
    show its path on the host."""
    size_kb = os.stat(source).st_size // 1024 + 64
    _mount("tmpfs", os.path.abspath(target), "tmpfs", MS_NOSUID | MS_NODEV, f"size={size_kb}k,mode=555")
    copy = f"{target}/{name}"
    shutil.copy(source, copy)
    _mount(None, os.path.abspath(target), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    return copy


def mount_sysfs(target: str) -> None:
    """Read-only sysfs as the calling thread sees it (its network namespace's devices)."""
    _mount("sysfs", os.path.abspath(target), "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None)


def mount_ext4(device: str, target: str, options: str = "", *, readonly: bool = False, devices: bool = False) -> None:
    """An ext4 filesystem on a block device (a sandbox's disk on its loop device), nosuid,
    and nodev unless ``devices`` (device nodes on it open)."""
    flags = MS_NOSUID | (0 if devices else MS_NODEV) | (MS_RDONLY if readonly else 0)
    _mount(device, os.path.abspath(target), "ext4", flags, options or None)


def umount(target: str, lazy: bool = True) -> bool:
    """Unmount; returns False when nothing was mounted there.

    With lazy=True a busy mount (EBUSY: e.g. a process still has a cwd in it) is detached
    instead, so cleanup never leaves a mount behind in our namespace.
    """
    path = os.path.abspath(target).encode()
    if _libc.umount2(path, 0) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOENT):
        return False
    if err == errno.EBUSY and lazy:
        if _libc.umount2(path, MNT_DETACH) == 0:
            return True
        err = ctypes.get_errno()
    raise OSError(err, f"umount: {os.strerror(err)}", target)


def detach(target: str) -> None:
    """Detach the mount at target from this namespace at once (MNT_DETACH): what still uses
    it (an open descriptor, another namespace's copy) keeps it alive, nothing new finds it."""
    if _libc.umount2(os.path.abspath(target).encode(), MNT_DETACH) != 0:
        _raise(target, "umount2(MNT_DETACH)")


def umount_tree(root: str) -> None:
    """Unmount everything at or below root, deepest first."""
    root = os.path.abspath(root)
    below = [m for m in mountpoints() if m == root or m.startswith(root + "/")]
    for m in sorted(set(below), key=len, reverse=True):
        while umount(m):
            # Stacked mounts on the same point: peel them all.
            pass
