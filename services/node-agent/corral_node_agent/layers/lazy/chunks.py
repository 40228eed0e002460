"""Node-wide cache of verified layer chunks, shared by every lazily loaded layer.

chunks/<2 hex>/<hex>    one chunk, named by the sha256 of its bytes (so a chunk shared by
                        several layers is fetched and stored once per node)

Every chunk is checked against its digest when it arrives, and again when it is first read
back from disk by this process and every ``reverify_s`` after that: a corrupted file is
dropped and refetched, never served. Between checks a read takes only the bytes it needs
(``pread``); a small in-memory LRU of verified chunks absorbs the rest. Fetches retry with
exponential backoff up to a deadline, then fail with EIO: a reader gets an error, never a
hang and never a wrong byte.

Disk use is bounded (``max_bytes``) by LRU eviction of chunks that no mounted layer needs:
a pinned layer's chunks are never evicted, so the bound is soft when the pinned set alone
exceeds it.

Blocking code: called from the FUSE worker threads (and worker threads of the event loop).
"""

import hashlib
import os
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from errno import EIO

from corral_common.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class ChunkIndex:
    digest: str  # the whole blob's sha256:<hex>
    size: int
    chunk_size: int
    chunks: tuple[str, ...]  # hex digests, in order

    def span(self, i: int) -> tuple[int, int]:
        start = i * self.chunk_size
        return start, min(self.chunk_size, self.size - start)


@dataclass
class ChunkStats:
    requests: int = 0  # chunk lookups by readers
    mem_hits: int = 0
    disk_hits: int = 0
    fetched: int = 0  # chunks downloaded (after dedupe of concurrent requests)
    fetched_bytes: int = 0
    written_bytes: int = 0
    corrupt: int = 0  # cached chunks that failed verification (then refetched)
    bad_downloads: int = 0  # downloads whose bytes did not match the digest
    retries: int = 0
    failures: int = 0  # lookups that ended in EIO
    evicted: int = 0
    fetched_digests: Counter = field(default_factory=Counter)

    @property
    def hit_rate(self) -> float:
        return (self.mem_hits + self.disk_hits) / self.requests if self.requests else 0.0


class ChunkUnavailable(OSError):
    def __init__(self, digest: str, why: str):
        super().__init__(EIO, f"chunk {digest} unavailable: {why}")
        self.digest = digest


class ChunkCache:
    def __init__(self, root: str, fetch: Callable[[str], bytes], *, max_bytes: int,
                 deadline_s: float = 15.0, mem_chunks: int = 32, backoff_s: float = 0.05,
                 reverify_s: float = 300.0):
        self.root = root
        self.fetch = fetch  # one attempt: returns the bytes or raises
        self.max_bytes = max_bytes
        self.deadline_s = deadline_s
        self.backoff_s = backoff_s
        self.mem_chunks = mem_chunks
        self.reverify_s = reverify_s
        self._verified: dict[str, float] = {}  # hex -> monotonic time its file was last checked
        self.stats = ChunkStats()
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._lru: OrderedDict[str, int] = OrderedDict()  # on disk, least recently used first
        self._mem: OrderedDict[str, bytes] = OrderedDict()
        self._pins: Counter[str] = Counter()
        self._inflight: dict[str, Future] = {}
        self.total_bytes = 0
        os.makedirs(root, exist_ok=True)
        self._scan()

    def _scan(self) -> None:
        found = []
        for sub in os.listdir(self.root):
            d = f"{self.root}/{sub}"
            if not os.path.isdir(d):
                continue
            for name in os.listdir(d):
                p = f"{d}/{name}"
                if name.startswith(".tmp-"):
                    os.unlink(p)  # a write a previous run did not finish
                    continue
                st = os.stat(p)
                found.append((st.st_mtime, name, st.st_size))
        for _, name, size in sorted(found):
            self._lru[name] = size
            self.total_bytes += size

    def path(self, hexd: str) -> str:
        return f"{self.root}/{hexd[:2]}/{hexd}"

    def cached(self, hexd: str) -> bool:
        return hexd in self._lru

    # ---- pins ---------------------------------------------------------------------------

    def pin(self, index: ChunkIndex) -> None:
        with self._lock:
            self._pins.update(set(index.chunks))

    def unpin(self, index: ChunkIndex) -> None:
        with self._lock:
            self._pins.subtract(set(index.chunks))
            for h in set(index.chunks):
                if self._pins[h] <= 0:
                    del self._pins[h]
            self._evict_locked()

    def pinned(self, hexd: str) -> bool:
        return self._pins.get(hexd, 0) > 0

    # ---- reads --------------------------------------------------------------------------

    def read(self, index: ChunkIndex, offset: int, size: int) -> bytes:
        end = min(offset + size, index.size)
        out = []
        while offset < end:
            i = offset // index.chunk_size
            start, length = index.span(i)
            lo, hi = offset - start, min(end, start + length) - start
            data = self._range_if_verified(index.chunks[i], lo, hi - lo)
            out.append(data if data is not None else self.get(index, i)[lo:hi])
            offset = start + length
        return b"".join(out)

    def _range_if_verified(self, hexd: str, offset: int, size: int) -> bytes | None:
        """Part of a chunk from memory or from a recently verified file; None otherwise."""
        with self._lock:
            data = self._mem.get(hexd)
            if data is not None:
                self.stats.requests += 1
                self.stats.mem_hits += 1
                self._mem.move_to_end(hexd)
                if hexd in self._lru:
                    self._lru.move_to_end(hexd)
                return data[offset:offset + size]
            checked = self._verified.get(hexd)
            if checked is None or time.monotonic() - checked > self.reverify_s or hexd not in self._lru:
                return None
        try:
            fd = os.open(self.path(hexd), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            data = os.pread(fd, size, offset)
        finally:
            os.close(fd)
        if len(data) != size:
            return None
        with self._lock:
            self.stats.requests += 1
            self.stats.disk_hits += 1
            if hexd in self._lru:
                self._lru.move_to_end(hexd)
        return data

    def get(self, index: ChunkIndex, i: int) -> bytes:
        hexd = index.chunks[i]
        length = index.span(i)[1]
        with self._lock:
            self.stats.requests += 1
            data = self._mem.get(hexd)
            if data is not None:
                self._mem.move_to_end(hexd)
                if hexd in self._lru:
                    self._lru.move_to_end(hexd)
                self.stats.mem_hits += 1
                return data
        data = self._read_disk(hexd, length)
        if data is not None:
            with self._lock:
                self.stats.disk_hits += 1
            return data
        return self._fetch_shared(hexd, length)

    def _remember(self, hexd: str, data: bytes) -> None:
        # Caller holds the lock.
        self._mem[hexd] = data
        self._mem.move_to_end(hexd)
        while len(self._mem) > self.mem_chunks:
            self._mem.popitem(last=False)

    def _read_disk(self, hexd: str, length: int) -> bytes | None:
        if hexd not in self._lru:
            return None
        try:
            with open(self.path(hexd), "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            with self._lock:
                self._forget_locked(hexd)
            return None
        if len(data) != length or hashlib.sha256(data).hexdigest() != hexd:
            log.warning("chunk.corrupt", chunk=hexd, size=len(data))
            with self._lock:
                self.stats.corrupt += 1
                self._forget_locked(hexd)
            try:
                os.unlink(self.path(hexd))
            except FileNotFoundError:
                pass
            return None
        with self._lock:
            if hexd in self._lru:
                self._lru.move_to_end(hexd)
            self._verified[hexd] = time.monotonic()
            self._remember(hexd, data)
        return data

    def _fetch_shared(self, hexd: str, length: int) -> bytes:
        with self._lock:
            fut = self._inflight.get(hexd)
            owner = fut is None
            if owner:
                fut = self._inflight[hexd] = Future()
        if not owner:
            return fut.result()
        try:
            data = self._fetch_with_retry(hexd, length)
            self._store(hexd, data)
            fut.set_result(data)
            return data
        except BaseException as exc:
            fut.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._inflight.pop(hexd, None)

    def _fetch_with_retry(self, hexd: str, length: int) -> bytes:
        deadline = time.monotonic() + self.deadline_s
        delay = self.backoff_s
        why = "no attempt"
        while True:
            if self.stopping.is_set():
                raise ChunkUnavailable(hexd, "node-agent stopping")
            try:
                data = self.fetch(hexd)
                if len(data) == length and hashlib.sha256(data).hexdigest() == hexd:
                    with self._lock:
                        self.stats.fetched += 1
                        self.stats.fetched_bytes += len(data)
                        self.stats.fetched_digests[hexd] += 1
                    return data
                why = "content does not match its digest"
                with self._lock:
                    self.stats.bad_downloads += 1
            except Exception as exc:  # noqa: BLE001 - any failure is one failed attempt
                why = f"{type(exc).__name__}: {exc}"
            left = deadline - time.monotonic()
            if left <= 0:
                with self._lock:
                    self.stats.failures += 1
                log.warning("chunk.unavailable", chunk=hexd, error=why)
                raise ChunkUnavailable(hexd, why)
            with self._lock:
                self.stats.retries += 1
            self.stopping.wait(min(delay, left))
            delay = min(delay * 2, 2.0)

    def _store(self, hexd: str, data: bytes) -> None:
        path = self.path(hexd)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{os.path.dirname(path)}/.tmp-{hexd}-{threading.get_ident()}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except OSError:
            # A full or failing cache disk must not fail the read: serve from memory.
            log.exception("chunk.store_failed", chunk=hexd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            with self._lock:
                self._remember(hexd, data)
            return
        with self._lock:
            self.stats.written_bytes += len(data)
            if hexd not in self._lru:
                self.total_bytes += len(data)
            self._lru[hexd] = len(data)
            self._lru.move_to_end(hexd)
            self._verified[hexd] = time.monotonic()
            self._remember(hexd, data)
            self._evict_locked()

    # ---- eviction -----------------------------------------------------------------------

    def _forget_locked(self, hexd: str) -> None:
        size = self._lru.pop(hexd, None)
        if size is not None:
            self.total_bytes -= size
        self._mem.pop(hexd, None)
        self._verified.pop(hexd, None)

    def _evict_locked(self) -> None:
        if self.total_bytes <= self.max_bytes:
            return
        for hexd in list(self._lru):
            if self.total_bytes <= self.max_bytes:
                break
            if self._pins.get(hexd, 0) > 0 or hexd in self._inflight:
                continue
            self._forget_locked(hexd)
            self.stats.evicted += 1
            try:
                os.unlink(self.path(hexd))
            except FileNotFoundError:
                pass

    def evict(self) -> None:
        with self._lock:
            self._evict_locked()

    def drop_memory(self) -> None:
        """Forget the in-memory copies and which files were verified: the next read of each
        chunk checks its file again (tests; memory pressure)."""
        with self._lock:
            self._mem.clear()
            self._verified.clear()

    def prefetch(self, index: ChunkIndex) -> None:
        """Fetch every chunk of a layer (blocking; run in a background thread)."""
        for i, hexd in enumerate(index.chunks):
            if self.stopping.is_set():
                return
            if hexd in self._lru:
                continue
            try:
                self._fetch_shared(hexd, index.span(i)[1])
            except OSError:
                return
