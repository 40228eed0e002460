"""The node-wide chunk cache on its own: sharing, verification, retries, LRU bound, pins."""

import errno
import hashlib
import os
import threading
import time

import pytest

from corral_node_agent.layers.lazy.chunks import READAHEAD_MAX, SEQUENTIAL_AFTER, ChunkCache, ChunkIndex
from tests.polling import until_sync

CS = 4096


def _index(blob: bytes) -> tuple[ChunkIndex, dict[str, bytes]]:
    parts = [blob[i:i + CS] for i in range(0, len(blob), CS)]
    hexes = tuple(hashlib.sha256(p).hexdigest() for p in parts)
    return (ChunkIndex(digest="sha256:" + hashlib.sha256(blob).hexdigest(), size=len(blob), chunk_size=CS,
                       chunks=hexes), dict(zip(hexes, parts, strict=True)))


class Server:
    def __init__(self):
        self.chunks: dict[str, bytes] = {}
        self.calls: list[str] = []  # chunks asked for
        self.requests: list[tuple[int, int]] = []  # (start, count)
        self.fail = 0  # fail this many next calls
        self.cut_after: int | None = None  # end the next run's response after this many chunks
        self.lock = threading.Lock()

    def fetch(self, index: ChunkIndex, start: int, count: int):
        with self.lock:
            self.requests.append((start, count))
            self.calls += index.chunks[start:start + count]
            if self.fail:
                self.fail -= 1
                raise ConnectionError("down")
            cut, self.cut_after = self.cut_after, None
        time.sleep(0.01)
        for n, hexd in enumerate(index.chunks[start:start + count]):
            if cut is not None and n == cut:
                raise ConnectionError("reset")
            yield self.chunks[hexd]


def test_reads_ranges_and_shares_identical_chunks_across_layers(tmp_path):
    shared = os.urandom(2 * CS)
    a, ca = _index(shared + os.urandom(CS + 10))
    b, cb = _index(shared + os.urandom(CS))
    srv = Server()
    srv.chunks.update(ca | cb)
    cache = ChunkCache(str(tmp_path), srv.fetch, max_bytes=1 << 30)
    blob_a = b"".join(ca[h] for h in a.chunks)
    assert cache.read(a, 100, 3 * CS) == blob_a[100:100 + 3 * CS]
    assert cache.read(a, 0, a.size + 100) == blob_a
    blob_b = b"".join(cb[h] for h in b.chunks)
    assert cache.read(b, 0, b.size) == blob_b
    assert len(srv.calls) == len(set(a.chunks) | set(b.chunks)) == 5  # shared chunks fetched once
    # Concurrent readers of one missing chunk share one fetch.
    c, cc = _index(os.urandom(CS))
    srv.chunks.update(cc)
    threads = [threading.Thread(target=cache.get, args=(c, 0)) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert srv.calls.count(c.chunks[0]) == 1


def test_retries_then_eio_and_bad_bytes_never_served(tmp_path):
    idx, chunks = _index(os.urandom(2 * CS))
    srv = Server()
    srv.chunks.update(chunks)
    cache = ChunkCache(str(tmp_path), srv.fetch, max_bytes=1 << 30, deadline_s=5, backoff_s=0.01)
    srv.fail = 3
    assert cache.get(idx, 0) == chunks[idx.chunks[0]]
    assert cache.stats.retries == 3
    cache2 = ChunkCache(str(tmp_path / "b"), lambda i, s, n: [b"wrong"] * n, max_bytes=1 << 30, deadline_s=0.2, backoff_s=0.01)
    t0 = time.monotonic()
    with pytest.raises(OSError) as exc:
        cache2.get(idx, 1)
    assert exc.value.errno == errno.EIO and time.monotonic() - t0 < 2
    assert cache2.stats.bad_downloads >= 1 and not os.listdir(tmp_path / "b")


def test_corrupt_chunk_on_disk_is_refetched(tmp_path):
    idx, chunks = _index(os.urandom(CS))
    srv = Server()
    srv.chunks.update(chunks)
    cache = ChunkCache(str(tmp_path), srv.fetch, max_bytes=1 << 30)
    cache.get(idx, 0)
    with open(cache.path(idx.chunks[0]), "r+b") as fh:
        first = fh.read(1)
        fh.seek(0)
        fh.write(bytes([first[0] ^ 0xFF]))
    cache.drop_memory()
    assert cache.get(idx, 0) == chunks[idx.chunks[0]]
    assert cache.stats.corrupt == 1 and len(srv.calls) == 2


def test_lru_bound_spares_pinned_chunks(tmp_path):
    pinned, cp = _index(os.urandom(4 * CS))
    other, co = _index(os.urandom(4 * CS))
    srv = Server()
    srv.chunks.update(cp | co)
    cache = ChunkCache(str(tmp_path), srv.fetch, max_bytes=3 * CS, mem_chunks=0)
    cache.pin(pinned)
    cache.read(pinned, 0, pinned.size)
    cache.read(other, 0, other.size)
    assert all(os.path.exists(cache.path(h)) for h in pinned.chunks)
    # Over the bound and unpinned: evicted, except the one being stored right now.
    assert [os.path.exists(cache.path(h)) for h in other.chunks] == [False, False, False, True]
    assert cache.stats.evicted == 3
    cache.unpin(pinned)
    assert cache.total_bytes <= 3 * CS
    # Least recently used went first; the bound holds; a restart sees the same contents.
    kept = [h for h in pinned.chunks + other.chunks if os.path.exists(cache.path(h))]
    assert kept == [*pinned.chunks[2:], other.chunks[3]]
    again = ChunkCache(str(tmp_path), srv.fetch, max_bytes=3 * CS)
    assert again.total_bytes == 3 * CS and all(again.cached(h) for h in kept)


def test_cached_chunk_is_reverified_periodically(tmp_path):
    idx, chunks = _index(os.urandom(2 * CS))
    srv = Server()
    srv.chunks.update(chunks)
    cache = ChunkCache(str(tmp_path), srv.fetch, max_bytes=1 << 30, mem_chunks=0, reverify_s=3600)
    blob = b"".join(chunks[h] for h in idx.chunks)
    assert cache.read(idx, 0, idx.size) == blob
    assert cache.read(idx, 10, 100) == blob[10:110]  # verified recently: a pread of 100 bytes
    assert cache.stats.disk_hits == 1 and len(srv.calls) == 2
    cache.reverify_s = 0
    p = cache.path(idx.chunks[0])
    os.chmod(p, 0o644)
    with open(p, "r+b") as fh:
        fh.write(b"\0\0\0\0")
    assert cache.read(idx, 0, 200) == blob[:200]  # checked again: corrupt, refetched
    assert cache.stats.corrupt == 1 and len(srv.calls) == 3


def _read_by_chunk(cache: ChunkCache, idx: ChunkIndex, order) -> bytes:
    return b"".join(cache.read(idx, i * CS, CS) for i in order)


def test_sequential_reads_fetch_runs_and_random_reads_single_chunks(tmp_path):
    idx, chunks = _index(os.urandom(40 * CS + 123))
    srv = Server()
    srv.chunks.update(chunks)
    cache = ChunkCache(str(tmp_path), srv.fetch, max_bytes=1 << 30)
    blob = b"".join(chunks[h] for h in idx.chunks)
    assert _read_by_chunk(cache, idx, range(len(idx.chunks))) == blob
    # One chunk at a time until the reader looks sequential, then windows 2, 4, 8, 8, ...
    assert srv.requests[:SEQUENTIAL_AFTER] == [(i, 1) for i in range(SEQUENTIAL_AFTER)]
    assert [n for _, n in srv.requests[SEQUENTIAL_AFTER:SEQUENTIAL_AFTER + 3]] == [2, 4, 8]
    assert max(n for _, n in srv.requests) == READAHEAD_MAX
    assert len(srv.requests) < len(idx.chunks) // 3
    assert srv.calls == list(idx.chunks)  # each chunk once, none beyond the layer's end
    assert cache.stats.fetch_requests == len(srv.requests) and cache.stats.fetched == len(idx.chunks)
    assert cache.stats.readahead == len(idx.chunks) - len(srv.requests)
    # Random access: one chunk per miss, nothing read ahead.
    other, oc = _index(os.urandom(40 * CS))
    srv.chunks.update(oc)
    srv.requests.clear()
    order = [31, 3, 17, 9, 25, 0, 38, 12]
    assert _read_by_chunk(cache, other, order) == b"".join(oc[other.chunks[i]] for i in order)
    assert srv.requests == [(i, 1) for i in order]


def test_readahead_stops_at_cached_chunks(tmp_path):
    idx, chunks = _index(os.urandom(12 * CS))
    srv = Server()
    srv.chunks.update(chunks)
    cache = ChunkCache(str(tmp_path), srv.fetch, max_bytes=1 << 30)
    cache.get(idx, 5)  # cached already
    srv.requests.clear()
    _read_by_chunk(cache, idx, range(12))
    assert all(not (s <= 5 < s + n) for s, n in srv.requests)
    assert srv.calls.count(idx.chunks[5]) == 1 and sorted(set(srv.calls)) == sorted(idx.chunks)


def test_a_cut_run_delivers_what_came_and_readers_fetch_the_rest(tmp_path):
    idx, chunks = _index(os.urandom(16 * CS))
    srv = Server()
    srv.chunks.update(chunks)
    cache = ChunkCache(str(tmp_path), srv.fetch, max_bytes=1 << 30, backoff_s=0.01)
    _read_by_chunk(cache, idx, range(SEQUENTIAL_AFTER))
    srv.cut_after = 1  # the next run (2 chunks) ends after its first
    blob = b"".join(chunks[h] for h in idx.chunks)
    assert _read_by_chunk(cache, idx, range(16)) == blob
    assert srv.requests[SEQUENTIAL_AFTER] == (SEQUENTIAL_AFTER, 2)
    assert cache.stats.fetched == 16 and sorted(set(srv.calls)) == sorted(idx.chunks)
    assert cache.stats.retries == 0


def test_a_miss_on_a_chunk_another_run_is_fetching_waits_for_that_run(tmp_path):
    idx, chunks = _index(os.urandom(8 * CS))
    srv = Server()
    srv.chunks.update(chunks)
    gate = threading.Event()
    fetch = srv.fetch

    def slow(index, start, count):
        gate.wait(5)
        yield from fetch(index, start, count)

    cache = ChunkCache(str(tmp_path), slow, max_bytes=1 << 30)
    gate.set()
    _read_by_chunk(cache, idx, range(SEQUENTIAL_AFTER))
    gate.clear()
    runner = threading.Thread(target=cache.read, args=(idx, SEQUENTIAL_AFTER * CS, CS))
    ahead = SEQUENTIAL_AFTER + 1
    runner.start()  # claims a run of 2 and waits at the gate
    until_sync(lambda: idx.chunks[ahead] in cache._inflight, 5, "the run claimed its second chunk")
    readers = [threading.Thread(target=cache.get, args=(idx, ahead)) for _ in range(4)]
    [t.start() for t in readers]
    gate.set()
    runner.join()
    [t.join() for t in readers]
    assert srv.requests == [(i, 1) for i in range(SEQUENTIAL_AFTER)] + [(SEQUENTIAL_AFTER, 2)]
    assert srv.calls.count(idx.chunks[ahead]) == 1

