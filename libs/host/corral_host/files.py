"""File syscalls Python's os module lacks, via ctypes."""

import ctypes
import ctypes.util
import os

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def fallocate(fd: int, length: int) -> None:
    """Reserve length bytes for the file (fallocate(2) mode 0: unwritten extents, reading as
    zeros). Unlike posix_fallocate it never falls back to writing zeros: EOPNOTSUPP instead."""
    if _libc.fallocate(fd, 0, ctypes.c_int64(0), ctypes.c_int64(length)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fallocate: {os.strerror(err)}")
