"""The new mount API (open_tree, mount_setattr, fsopen/fsconfig/fsmount, move_mount) via ctypes.

What it is for: a sandbox's root overlay built from file descriptors, not path strings.
- Each layer is an idmapped, detached clone of the node's shared EROFS mount
  (``open_tree(OPEN_TREE_CLONE)`` + ``mount_setattr(MOUNT_ATTR_IDMAP)``): the files owned by
  0 on the image show as the sandbox's host root uid, without touching the shared mount.
- The clones are handed to overlayfs as ``lowerdir+`` fds (recent kernels take layers as
  fds, detached mounts included: proven on 6.18; an overlay mount itself cannot be
  idmapped, EINVAL). Overlay keeps private clones of its layers, so the fds are
  closed right after: nothing per sandbox is mounted besides the overlay itself, and it is
  gone with the overlay's umount.
- upper/work come from a detached (non-idmapped) clone of the upper directory: overlay
  prints layer options as the path of each fd, and a detached mount's paths start at its
  own root, so the sandbox's /proc/self/mountinfo reads ``lowerdir+=/,upperdir=/upper,
  workdir=/work`` instead of host paths.
"""

import ctypes
import ctypes.util
import errno
import os
import struct
from contextlib import ExitStack

# x86_64 and aarch64 share these numbers (the new mount API came after the table unification).
SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_FSOPEN = 430
SYS_FSCONFIG = 431
SYS_FSMOUNT = 432
SYS_MOUNT_SETATTR = 442

AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOUNT_ATTR_IDMAP = 0x00100000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
FSOPEN_CLOEXEC = 1
FSMOUNT_CLOEXEC = 1
FSCONFIG_SET_STRING = 1
FSCONFIG_SET_FD = 5
FSCONFIG_CMD_CREATE = 6

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _call(what: str, path: str, nr: int, *args) -> int:
    rc = _libc.syscall(nr, *args)
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}", path)
    return rc


def idmapped_clone(path: str, userns_fd: int) -> int:
    """A detached copy of the mount at ``path``, its ids shown through ``userns_fd``'s mapping
    (an fd: close it, or hand it to overlay). The shared mount itself is unchanged."""
    fd = _call("open_tree", path, SYS_OPEN_TREE, AT_FDCWD, os.fsencode(path), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)
    try:
        attr = struct.pack("QQQQ", MOUNT_ATTR_IDMAP, 0, 0, userns_fd)  # struct mount_attr
        _call("mount_setattr(MOUNT_ATTR_IDMAP)", path, SYS_MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH, attr, len(attr))
    except BaseException:
        os.close(fd)
        raise
    return fd


def detached_clone(path: str) -> int:
    """A detached bind of the directory at ``path`` (an fd; paths below it start at "/")."""
    return _call("open_tree", path, SYS_OPEN_TREE, AT_FDCWD, os.fsencode(path), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)


def mount_overlay_idmapped(lowers: list[str], upper_dir: str, target: str, userns_fd: int) -> None:
    """Mount at ``target`` an overlay of ``lowers`` (top first, each idmapped through
    ``userns_fd``) with ``upper_dir/upper`` and ``upper_dir/work`` as its writable layer."""
    if not lowers:
        raise OSError(errno.EINVAL, "overlay needs at least one lower dir", target)
    with ExitStack() as fds:
        def own(fd: int) -> int:
            fds.callback(os.close, fd)
            return fd

        fs = own(_call("fsopen", target, SYS_FSOPEN, b"overlay", FSOPEN_CLOEXEC))

        def set_fd(key: str, fd: int) -> None:
            try:
                _call(f"fsconfig {key}", target, SYS_FSCONFIG, fs, FSCONFIG_SET_FD, key.encode(), None, fd)
            except OSError as exc:
                raise OSError(exc.errno, f"{exc.strerror}{_fs_log(fs)}", target) from None

        for lower in lowers:
            set_fd("lowerdir+", own(idmapped_clone(lower, userns_fd)))
        tree = own(detached_clone(upper_dir))
        for key, name in (("upperdir", "upper"), ("workdir", "work")):
            set_fd(key, own(os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=tree)))
        try:
            _call("fsconfig create", target, SYS_FSCONFIG, fs, FSCONFIG_CMD_CREATE, None, None, 0)
        except OSError as exc:
            raise OSError(exc.errno, f"{exc.strerror}{_fs_log(fs)}", target) from None
        mnt = own(_call("fsmount", target, SYS_FSMOUNT, fs, FSMOUNT_CLOEXEC, 0))
        _call("move_mount", target, SYS_MOVE_MOUNT, mnt, b"", AT_FDCWD, os.fsencode(target), MOVE_MOUNT_F_EMPTY_PATH)


def _fs_log(fs: int) -> str:
    """What the filesystem said about a failed fsconfig (its context's message log)."""
    lines = []
    while True:
        try:
            lines.append(os.read(fs, 1024).decode(errors="replace").strip())
        except OSError:
            break
    return f" ({'; '.join(lines)})" if lines else ""
