"""Node-wide cache of verified layer chunks, shared by every lazily loaded layer.

chunks/<2 hex>/<hex>    one chunk, named by the sha256 of its bytes (so a chunk shared by
                        several layers is fetched and stored once per node)

Every chunk is checked against its digest when it arrives, and again when it is first read
back from disk by this process and every ``reverify_s`` after that: a corrupted file is
dropped and refetched, never served. Between checks a read takes only the bytes it needs
(``pread``); a small in-memory LRU of verified chunks absorbs the rest. Fetches retry with
exponential backoff up to a deadline, then fail with EIO: a reader gets an error, never a
hang and never a wrong byte.

Read-ahead: a miss whose previous ``SEQUENTIAL_AFTER`` chunks of the same layer were read
lately looks sequential, and fetches the following missing chunks with it in one request (a
run), the window doubling from 2 up to ``READAHEAD_MAX`` chunks while the reader keeps going;
any other miss fetches its chunk alone, so random reads write no more than they need. A run
stops at the first chunk already cached or being fetched. Concurrent misses on one chunk share
one fetch (its future), whether that chunk is the one asked for or part of another's run.

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
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from errno import EIO

from corral_common.logging import get_logger

log = get_logger(__name__)

SEQUENTIAL_AFTER = 3  # a miss right after this many chunks read lately starts read-ahead
READAHEAD_MAX = 8  # chunks in one run at most
_RECENT_PER_LAYER = 256  # chunk indexes remembered per layer for that judgement


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
    fetch_requests: int = 0  # HTTP requests made for them (a run is one)
    readahead: int = 0  # chunks fetched ahead of a sequential reader (in ``fetched`` too)
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


class _Abandoned(Exception):
    """A run stopped before this chunk (after delivering the one it was for): whoever waits
    on it fetches it themselves."""


# fetch(index, start, count): one attempt at chunks start..start+count-1 of the layer; yields
# each chunk's bytes in order (unverified) as they arrive, or raises.
Fetch = Callable[[ChunkIndex, int, int], Iterable[bytes]]


class ChunkCache:
    def __init__(self, root: str, fetch: Fetch, *, max_bytes: int,
                 deadline_s: float = 15.0, mem_chunks: int = 32, backoff_s: float = 0.05,
                 reverify_s: float = 300.0):
        self.root = root
        self.fetch = fetch
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
        self._recent: dict[str, OrderedDict[int, int]] = {}  # layer -> chunk read lately -> its run's window
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
            self._touch(index, i)
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
        return self._fetch_shared(index, i)

    # ---- read-ahead ---------------------------------------------------------------------

    def _touch(self, index: ChunkIndex, i: int) -> None:
        with self._lock:
            recent = self._recent.get(index.digest)
            if recent is None:
                recent = self._recent[index.digest] = OrderedDict()
            recent[i] = recent.pop(i, 0)
            if len(recent) > _RECENT_PER_LAYER:
                recent.popitem(last=False)

    def _claim_run_locked(self, index: ChunkIndex, i: int, window: int = 0) -> list[tuple[int, Future]]:
        """Chunk i and, when the access looks sequential (or ``window`` says how many), the
        missing chunks after it: each gets a future in ``_inflight`` (caller holds the lock;
        i is neither cached nor in flight)."""
        recent = self._recent.get(index.digest)
        if not window:
            window = 1
            if recent is not None and all(i - k in recent for k in range(1, SEQUENTIAL_AFTER + 1)):
                window = min(READAHEAD_MAX, max(2, 2 * recent[i - 1]))
        run = [i]
        seen = {index.chunks[i]}
        for j in range(i + 1, min(i + window, len(index.chunks))):
            hexd = index.chunks[j]
            if hexd in self._lru or hexd in self._inflight or hexd in seen:
                break
            run.append(j)
            seen.add(hexd)
        if window > 1 and recent is not None:
            for j in run:
                recent[j] = window
                recent.move_to_end(j)
        claimed = []
        for j in run:
            fut = self._inflight[index.chunks[j]] = Future()
            claimed.append((j, fut))
        return claimed

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

    def _fetch_shared(self, index: ChunkIndex, i: int) -> bytes:
        hexd = index.chunks[i]
        while True:
            with self._lock:
                fut = self._inflight.get(hexd)
                if fut is None:
                    run = self._claim_run_locked(index, i)
                    break
            try:
                return fut.result()
            except _Abandoned:
                continue  # the run it was part of ended early: fetch it now
        return self._fetch_run(index, run)

    def _fetch_run(self, index: ChunkIndex, run: list[tuple[int, Future]]) -> bytes:
        """Fetch a claimed run, verify and store each chunk as it arrives and settle its
        future; retry with backoff until the first chunk is in or the deadline passes."""
        first = index.chunks[run[0][0]]
        deadline = time.monotonic() + self.deadline_s
        delay = self.backoff_s
        done = 0  # chunks of the run delivered
        why = "no attempt"
        try:
            while True:
                if self.stopping.is_set():
                    raise ChunkUnavailable(first, "node-agent stopping")
                start, count = run[done][0], len(run) - done
                with self._lock:
                    self.stats.fetch_requests += 1
                try:
                    for data in self.fetch(index, start, count):
                        j, fut = run[done]
                        hexd = index.chunks[j]
                        if len(data) != index.span(j)[1] or hashlib.sha256(data).hexdigest() != hexd:
                            with self._lock:
                                self.stats.bad_downloads += 1
                            raise ValueError("content does not match its digest")
                        with self._lock:
                            self.stats.fetched += 1
                            self.stats.readahead += j != run[0][0]
                            self.stats.fetched_bytes += len(data)
                            self.stats.fetched_digests[hexd] += 1
                        self._store(hexd, data)
                        self._settle(hexd, fut, data)
                        done += 1
                        if done == len(run):
                            break
                    if done < len(run):
                        raise ValueError(f"response ended after {done} of {len(run)} chunks")
                except Exception as exc:  # noqa: BLE001 - any failure is one failed attempt
                    why = f"{type(exc).__name__}: {exc}"
                if done:
                    return run[0][1].result()  # read-ahead short of its end: no retry for it
                left = deadline - time.monotonic()
                if left <= 0:
                    with self._lock:
                        self.stats.failures += 1
                    log.warning("chunk.unavailable", chunk=first, error=why)
                    raise ChunkUnavailable(first, why)
                with self._lock:
                    self.stats.retries += 1
                self.stopping.wait(min(delay, left))
                delay = min(delay * 2, 2.0)
        except BaseException as exc:
            for j, fut in run[done:done + 1]:
                self._settle(index.chunks[j], fut, exc=exc)
            raise
        finally:
            for j, fut in run[done:]:
                if not fut.done():
                    self._settle(index.chunks[j], fut, exc=_Abandoned())

    def _settle(self, hexd: str, fut: Future, data: bytes | None = None, exc: BaseException | None = None) -> None:
        if exc is None:
            fut.set_result(data)
        else:
            fut.set_exception(exc)
        with self._lock:
            if self._inflight.get(hexd) is fut:
                del self._inflight[hexd]

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
        """Fetch every chunk of a layer, in runs (blocking; run in a background thread)."""
        for i, hexd in enumerate(index.chunks):
            if self.stopping.is_set():
                return
            with self._lock:
                if hexd in self._lru or hexd in self._inflight:
                    continue
                run = self._claim_run_locked(index, i, READAHEAD_MAX)
            try:
                self._fetch_run(index, run)
            except OSError:
                return
