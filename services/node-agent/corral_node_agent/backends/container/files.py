"""File access inside a sandbox's merged rootfs, done host-side by the (root) agent.

Sandbox code controls the tree, so nothing here may be steered by it: every component is
opened relative to its parent's fd with O_NOFOLLOW (a planted symlink can never lead the
agent to a host file), `..` is refused outright, and only regular files are read/written
(O_NONBLOCK so a planted FIFO cannot block the agent on open).
"""

import asyncio
import errno
import os
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

from corral_common.contracts.exec import FileInfo
from corral_node_agent.backends.base import FileData
from corral_node_agent.backends.paths import DISK_FULL, LOC, os_error, sandbox_path, split_path
from corral_node_agent.errors import BadInput, DiskFull, NotFound, TooLarge

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@contextmanager
def open_parent(rootfs: str, parts: list[str], *, create: bool = False, uid: int = -1,
                gid: int = -1) -> Iterator[int]:
    """Yield an fd for the directory holding parts[-1] (or for the root when parts is empty),
    creating missing directories (owned by uid:gid) when create is set."""
    fd = os.open(rootfs, _DIR_FLAGS)
    try:
        for i, comp in enumerate(parts[:-1]):
            try:
                nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise NotFound(f"{sandbox_path(parts[:i + 1])}: no such directory", loc=LOC) from None
                try:
                    os.mkdir(comp, 0o755, dir_fd=fd)
                    os.chown(comp, uid, gid, dir_fd=fd, follow_symlinks=False)
                except (FileExistsError, FileNotFoundError):
                    # Lost a race with sandbox code (it made the directory, or removed or
                    # swapped the one just made, before the chown): the open below decides.
                    pass
                try:
                    nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise os_error(exc, parts[:i + 1]) from None
            except OSError as exc:
                raise os_error(exc, parts[:i + 1]) from None
            os.close(fd)
            fd = nfd
        yield fd
    finally:
        os.close(fd)


def open_read(rootfs: str, path: str) -> tuple[int, int]:
    """Open a regular file for reading; returns (fd, size). The caller closes fd."""
    parts = split_path(path)
    if not parts:
        raise BadInput("/: is a directory", loc=LOC)
    with open_parent(rootfs, parts) as dfd:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            raise os_error(exc, parts) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "is a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise BadInput(f"{sandbox_path(parts)}: {kind}", loc=LOC)
    os.set_blocking(fd, True)
    return fd, st.st_size


def open_write(rootfs: str, path: str, *, uid: int, gid: int, mode: int = 0o644) -> tuple[int, str, int]:
    """Create or truncate a regular file; returns (fd, name, parent_fd) so a failed upload
    can be unlinked through the same (already validated) parent. New files and parent dirs
    belong to uid:gid; an existing file keeps its owner."""
    parts = split_path(path)
    if not parts:
        raise BadInput("/: is a directory", loc=LOC)
    mode &= 0o777  # never setuid/setgid/sticky from an upload
    with open_parent(rootfs, parts, create=True, uid=uid, gid=gid) as dfd:
        name = parts[-1]
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            try:
                fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, mode, dir_fd=dfd)
                os.fchown(fd, uid, gid)
            except FileExistsError:
                fd = os.open(name, flags, dir_fd=dfd)
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    os.close(fd)
                    raise BadInput(f"{sandbox_path(parts)}: not a regular file", loc=LOC) from None
                os.ftruncate(fd, 0)
        except OSError as exc:
            raise os_error(exc, parts) from None
        os.fchmod(fd, mode)
        os.set_blocking(fd, True)
        return fd, name, os.dup(dfd)


def _info(name: str, path: str, st: os.stat_result) -> FileInfo:
    if stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    else:
        kind = "other"
    return FileInfo(name=name, path=path, type=kind, size=st.st_size, mode=stat.S_IMODE(st.st_mode),
                    mtime=st.st_mtime)


def stat_path(rootfs: str, path: str) -> FileInfo:
    parts = split_path(path)
    if not parts:
        return _info("/", "/", os.lstat(rootfs))
    with open_parent(rootfs, parts) as dfd:
        try:
            st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        except OSError as exc:
            raise os_error(exc, parts) from None
    return _info(parts[-1], sandbox_path(parts), st)


def list_dir(rootfs: str, path: str) -> list[FileInfo]:
    parts = split_path(path)
    # The trailing "." makes open_parent walk (and vet) every real component.
    with open_parent(rootfs, [*parts, "."]) as dfd:
        fd = os.dup(dfd)
    try:
        out = []
        base = sandbox_path(parts).rstrip("/")
        for name in sorted(os.listdir(fd)):
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed by sandbox code meanwhile
            out.append(_info(name, f"{base}/{name}", st))
        return out
    finally:
        os.close(fd)


# ---- the backend's file calls (blocking parts in a thread) --------------------------------


async def write(rootfs: str, path: str, data: FileData, *, uid: int, gid: int, mode: int, cap: int) -> int:
    """Write an upload (bytes or chunks) to path; more than ``cap`` bytes is TooLarge, a full
    disk DiskFull, and a failed upload leaves no file behind."""
    fd, name, dfd = await asyncio.to_thread(open_write, rootfs, path, uid=uid, gid=gid, mode=mode)
    written = 0
    ok = False
    try:
        chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
        if isinstance(chunks, list):
            for c in chunks:
                written = _write_chunk(fd, c, written, cap)
        else:
            async for c in chunks:
                written = _write_chunk(fd, c, written, cap)
        ok = True
        return written
    finally:
        os.close(fd)
        if not ok:
            try:
                os.unlink(name, dir_fd=dfd)
            except OSError:
                pass
        os.close(dfd)


def _write_chunk(fd: int, chunk: bytes, written: int, cap: int) -> int:
    if written + len(chunk) > cap:
        raise TooLarge(f"upload exceeds {cap} bytes", loc=["body"])
    view = memoryview(chunk)
    try:
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFull(DISK_FULL, loc=["body"]) from None
        raise
    return written + len(chunk)


async def read(rootfs: str, path: str) -> tuple[int, AsyncIterator[bytes]]:
    """(size, chunks) of a regular file; the file is closed when the chunks are consumed."""
    fd, size = await asyncio.to_thread(open_read, rootfs, path)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while True:
                block = await asyncio.to_thread(os.read, fd, 1 << 20)
                if not block:
                    return
                yield block
        finally:
            os.close(fd)

    return size, chunks()
