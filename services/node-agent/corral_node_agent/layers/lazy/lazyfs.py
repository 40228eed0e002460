"""A tiny read-only FUSE filesystem, speaking the kernel protocol over /dev/fuse directly.

It exposes one regular file per layer, named by the layer digest's hex, at
``<mountpoint>/<hex>``. Reads are answered by a ``reader(layer, offset, size) -> bytes``
callback (the node's chunk cache: fetch on demand, verify, store). EROFS is then mounted
straight from that file (file-backed mount, no loop device).

No libfuse: the protocol subset a read-only flat directory needs is small (INIT, LOOKUP,
GETATTR, OPEN, READ, RELEASE, OPENDIR, READDIR, STATFS), and doing it here avoids a C
dependency and libfuse's own threading. The daemon runs in worker threads of the lazy-layer
server process (``server``), never in the node-agent: each worker polls the device (opened non-blocking)
and a stop pipe, so ``stop()`` always ends them, and a slow chunk fetch in one worker does
not stall reads served by the others (FUSE_ASYNC_READ).
"""

import ctypes
import ctypes.util
import errno
import os
import select
import stat
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral_common.logging import get_logger

log = get_logger(__name__)

ROOT_ID = 1

# Opcodes (linux/fuse.h).
LOOKUP, FORGET, GETATTR = 1, 2, 3
OPEN, READ, STATFS, RELEASE = 14, 15, 17, 18
GETXATTR, LISTXATTR, FLUSH, INIT = 22, 23, 25, 26
OPENDIR, READDIR, RELEASEDIR = 27, 28, 29
INTERRUPT, DESTROY, BATCH_FORGET = 36, 38, 42
_NO_REPLY = {FORGET, BATCH_FORGET, INTERRUPT}

FUSE_ASYNC_READ = 1 << 0
FUSE_MAX_PAGES = 1 << 22
FOPEN_KEEP_CACHE = 1 << 1

IN_HDR = struct.Struct("<IIQQIIIHH")  # 40 bytes
OUT_HDR = struct.Struct("<IiQ")  # 16
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # 88
ENTRY_HEAD = struct.Struct("<QQQQII")  # nodeid, generation, entry_valid, attr_valid, nsecs
ATTR_HEAD = struct.Struct("<QII")  # attr_valid, attr_valid_nsec, dummy
INIT_IN = struct.Struct("<IIII")
INIT_OUT = struct.Struct("<IIIIHHIIHHII")  # 48 bytes, then zero padding to 64
READ_IN = struct.Struct("<QQII")  # fh, offset, size, read_flags (rest ignored)
OPEN_OUT = struct.Struct("<QIi")
KSTATFS = struct.Struct("<QQQQQIIII")  # + 24 bytes spare
DIRENT = struct.Struct("<QQII")

MAX_READ = 1 << 20
_BUF_SIZE = MAX_READ + 64 * 1024
_TTL_S = 86400  # contents are immutable: let the kernel cache names and attributes

MS_RDONLY, MS_NOSUID, MS_NODEV = 1, 2, 4
MNT_DETACH = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


@dataclass
class LayerFile:
    name: str  # digest hex
    ino: int
    size: int
    index: Any  # whatever the reader needs (the chunk index)
    opens: int = field(default=0)


Reader = Callable[[LayerFile, int, int], bytes]


class LazyFS:
    def __init__(self, mountpoint: str, reader: Reader, *, workers: int = 8,
                 on_use: Callable[[LayerFile, bool], None] | None = None):
        self.mountpoint = os.path.abspath(mountpoint)
        self.reader = reader
        # on_use(file, True) when a file's first open arrives, (file, False) after its last
        # release: an EROFS mount (or a QEMU) holds its file open for as long as it lives.
        self.on_use = on_use
        self.workers = workers
        self._files: dict[str, LayerFile] = {}
        self._by_ino: dict[int, LayerFile] = {}
        self._next_ino = 2
        self._lock = threading.Lock()
        self._fd = -1
        self._stop_r = self._stop_w = -1
        self._threads: list[threading.Thread] = []
        self._mounted = False
        self._uid, self._gid = os.getuid(), os.getgid()

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        os.makedirs(self.mountpoint, exist_ok=True)
        self._fd = os.open("/dev/fuse", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        opts = (f"fd={self._fd},rootmode=40000,user_id={self._uid},group_id={self._gid},"
                f"allow_other,default_permissions,max_read={MAX_READ}")
        rc = _libc.mount(b"corral-lazy", self.mountpoint.encode(), b"fuse",
                         MS_RDONLY | MS_NOSUID | MS_NODEV, opts.encode())
        if rc != 0:
            err = ctypes.get_errno()
            self._close_fds()
            raise OSError(err, f"mount fuse: {os.strerror(err)}", self.mountpoint)
        self._mounted = True
        for i in range(self.workers):
            t = threading.Thread(target=self._serve, name=f"corral-lazyfs-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Unmount (detached: EROFS mounts still on it go with it) and end the workers."""
        if self._mounted:
            if _libc.umount2(self.mountpoint.encode(), MNT_DETACH) != 0:
                err = ctypes.get_errno()
                if err not in (errno.EINVAL, errno.ENOENT):
                    log.warning("lazyfs.umount_failed", path=self.mountpoint, error=os.strerror(err))
            self._mounted = False
        if self._stop_w >= 0:
            os.write(self._stop_w, b"x")
        for t in self._threads:
            t.join(timeout=30)
        self._threads.clear()
        self._close_fds()

    def _close_fds(self) -> None:
        # Closing the device aborts the connection: anything still holding a file gets
        # ENOTCONN, never a hang.
        for fd in (self._fd, self._stop_r, self._stop_w):
            if fd >= 0:
                os.close(fd)
        self._fd = self._stop_r = self._stop_w = -1

    # ---- registry -----------------------------------------------------------------------

    def add(self, name: str, size: int, index: Any) -> str:
        with self._lock:
            f = self._files.get(name)
            if f is None:
                f = LayerFile(name=name, ino=self._next_ino, size=size, index=index)
                self._next_ino += 1
                self._files[name] = f
                self._by_ino[f.ino] = f
        return f"{self.mountpoint}/{name}"

    def has(self, name: str) -> bool:
        return name in self._files

    def path(self, name: str) -> str:
        return f"{self.mountpoint}/{name}"

    # ---- protocol -----------------------------------------------------------------------

    def _serve(self) -> None:
        buf = bytearray(_BUF_SIZE)
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            events = poller.poll()
            if any(fd == self._stop_r for fd, _ in events):
                return
            try:
                n = os.readv(self._fd, [buf])
            except BlockingIOError:
                continue  # another worker took it
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.EINTR):
                    continue  # request interrupted before we read it
                if exc.errno == errno.ENODEV:
                    return  # unmounted / aborted
                log.exception("lazyfs.read_failed")
                return
            req = bytes(buf[:n])
            try:
                self._dispatch(req)
            except Exception:
                log.exception("lazyfs.dispatch_failed")

    def _reply(self, unique: int, data: bytes = b"", err: int = 0) -> None:
        out = OUT_HDR.pack(OUT_HDR.size + (0 if err else len(data)), -err, unique)
        try:
            os.write(self._fd, out if err else out + data)
        except OSError as exc:
            # ENOENT: the request was interrupted/aborted meanwhile; nothing to do.
            if exc.errno not in (errno.ENOENT, errno.ENODEV, errno.EBADF):
                raise

    def _attr(self, f: LayerFile | None) -> bytes:
        if f is None:
            return ATTR.pack(ROOT_ID, 0, 0, 0, 0, 0, 0, 0, 0, stat.S_IFDIR | 0o555, 2,
                             self._uid, self._gid, 0, 4096, 0)
        return ATTR.pack(f.ino, f.size, (f.size + 511) // 512, 0, 0, 0, 0, 0, 0,
                         stat.S_IFREG | 0o444, 1, self._uid, self._gid, 0, 4096, 0)

    def _dispatch(self, req: bytes) -> None:
        _len, opcode, unique, nodeid, _uid, _gid, _pid, _ext, _pad = IN_HDR.unpack_from(req)
        body = memoryview(req)[IN_HDR.size:]
        if opcode in _NO_REPLY:
            return
        if opcode == INIT:
            major, minor, max_readahead, flags = INIT_IN.unpack_from(body)
            want = flags & (FUSE_ASYNC_READ | FUSE_MAX_PAGES)
            out = INIT_OUT.pack(7, min(minor, 31), min(max_readahead, MAX_READ), want,
                                16, 12, 4096, 1, MAX_READ // 4096, 0, 0, 0)
            self._reply(unique, out + bytes(64 - INIT_OUT.size))
        elif opcode == LOOKUP:
            name = bytes(body).split(b"\0", 1)[0].decode(errors="replace")
            f = self._files.get(name) if nodeid == ROOT_ID else None
            if f is None:
                self._reply(unique, err=errno.ENOENT)
                return
            self._reply(unique, ENTRY_HEAD.pack(f.ino, 0, _TTL_S, _TTL_S, 0, 0) + self._attr(f))
        elif opcode == GETATTR:
            f = None if nodeid == ROOT_ID else self._by_ino.get(nodeid)
            if f is None and nodeid != ROOT_ID:
                self._reply(unique, err=errno.ENOENT)
                return
            self._reply(unique, ATTR_HEAD.pack(_TTL_S, 0, 0) + self._attr(f))
        elif opcode == OPEN:
            f = self._by_ino.get(nodeid)
            (flags,) = struct.unpack_from("<I", body)
            if f is None:
                self._reply(unique, err=errno.ENOENT)
            elif flags & os.O_ACCMODE != os.O_RDONLY:
                self._reply(unique, err=errno.EROFS)
            else:
                with self._lock:
                    f.opens += 1
                    if f.opens == 1 and self.on_use is not None:
                        self.on_use(f, True)  # under the lock: never reordered with a release
                self._reply(unique, OPEN_OUT.pack(0, FOPEN_KEEP_CACHE, 0))
        elif opcode == READ:
            f = self._by_ino.get(nodeid)
            if f is None:
                self._reply(unique, err=errno.ENOENT)
                return
            _fh, offset, size, _rf = READ_IN.unpack_from(body)
            if offset >= f.size:
                self._reply(unique, b"")
                return
            size = min(size, f.size - offset)
            try:
                data = self.reader(f, offset, size)
            except OSError as exc:
                self._reply(unique, err=exc.errno or errno.EIO)
                return
            except Exception:
                log.exception("lazyfs.reader_failed", layer=f.name)
                self._reply(unique, err=errno.EIO)
                return
            self._reply(unique, data)
        elif opcode == RELEASE:
            f = self._by_ino.get(nodeid)
            if f is not None:
                with self._lock:
                    f.opens -= 1
                    if f.opens == 0 and self.on_use is not None:
                        self.on_use(f, False)
            self._reply(unique)
        elif opcode in (FLUSH, RELEASEDIR):
            self._reply(unique)
        elif opcode == OPENDIR:
            if nodeid != ROOT_ID:
                self._reply(unique, err=errno.ENOTDIR)
            else:
                self._reply(unique, OPEN_OUT.pack(0, 0, 0))
        elif opcode == READDIR:
            _fh, offset, size, _rf = READ_IN.unpack_from(body)
            entries = [(ROOT_ID, ".", stat.S_IFDIR), (ROOT_ID, "..", stat.S_IFDIR)]
            entries += [(f.ino, f.name, stat.S_IFREG) for f in list(self._files.values())]
            out = bytearray()
            for i in range(offset, len(entries)):
                ino, name, mode = entries[i]
                raw = name.encode()
                rec = DIRENT.pack(ino, i + 1, len(raw), mode >> 12) + raw
                rec += bytes(-len(rec) % 8)
                if len(out) + len(rec) > size:
                    break
                out += rec
            self._reply(unique, bytes(out))
        elif opcode == STATFS:
            total = sum(f.size for f in self._files.values()) // 4096
            self._reply(unique, KSTATFS.pack(total, 0, 0, len(self._files), 0, 4096, 255, 4096, 0) + bytes(24))
        elif opcode == DESTROY:
            self._reply(unique)
        else:
            self._reply(unique, err=errno.ENOSYS)
