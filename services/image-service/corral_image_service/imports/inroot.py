"""Paths inside an unpacked image, resolved as if chrooted there: never through a symlink
out of it.

openat2(2) with ``RESOLVE_IN_ROOT`` makes the kernel treat the tree's root as "/" for the
whole walk: ``..`` stops at it and an absolute symlink (``etc -> /etc``, common in images)
resolves inside the tree. Every write then names only a last component relative to that
directory fd, without following it. (An earlier flattener that joined paths as strings
followed an absolute symlink in an image and wrote onto the host: HOST-NOTES.)
"""

import ctypes
import errno
import os

_SYS_OPENAT2 = 437  # x86_64 and aarch64 alike
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def openat2_in_root(root_fd: int, path: str, flags: int) -> int:
    """``path`` (relative to the root; "" is the root) opened with ``flags``, resolved in root."""
    how = _OpenHow(flags=flags | os.O_CLOEXEC, mode=0, resolve=_RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
    fd = _libc.syscall(_SYS_OPENAT2, root_fd, (path or ".").encode(), ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


class Root:
    """An unpacked tree, with its parent directories opened (and made) inside it."""

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        os.close(self.fd)

    def open_dir(self, rel: str, *, create: bool = False) -> int:
        """An O_PATH fd of directory ``rel`` (missing parents made 0755 root:root when
        ``create``); ENOTDIR/ENOENT as OSError otherwise."""
        try:
            return openat2_in_root(self.fd, rel, os.O_PATH | os.O_DIRECTORY)
        except FileNotFoundError:
            if not create or not rel:
                raise
        parent, _, name = rel.rpartition("/")
        parent_fd = self.open_dir(parent, create=True)
        try:
            try:
                os.mkdir(name, 0o755, dir_fd=parent_fd)
            except FileExistsError:
                pass  # a dangling symlink: the walk below says ENOENT
            return openat2_in_root(parent_fd, name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
        finally:
            os.close(parent_fd)

    def read_file(self, rel: str, limit: int = 1 << 20) -> bytes | None:
        """A small file of the tree (``/etc/passwd``), or None when absent or not a file."""
        try:
            fd = openat2_in_root(self.fd, rel, os.O_RDONLY)
        except OSError:
            return None
        try:
            return os.read(fd, limit)
        finally:
            os.close(fd)


def remove_entry(dir_fd: int, name: str) -> bool:
    """Remove ``name`` in ``dir_fd`` whatever it is (a directory with all it holds), never
    following a symlink; False when there was nothing."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if (st.st_mode & 0o170000) == 0o040000:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            clear_dir(fd)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)
    return True


def clear_dir(fd: int) -> None:
    """Remove everything inside the directory open as ``fd`` (an O_RDONLY fd)."""
    for entry in os.listdir(fd):
        try:
            remove_entry(fd, entry)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
