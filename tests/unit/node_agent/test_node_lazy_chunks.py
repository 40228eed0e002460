"""The node-wide chunk cache on its own: sharing, verification, retries, LRU bound, pins."""

import errno
import hashlib
import os
import threading
import time

import pytest

from corral_node_agent.layers.lazy.chunks import ChunkCache, ChunkIndex

CS = 4096


def _index(blob: bytes) -> tuple[ChunkIndex, dict[str, bytes]]:
    parts = [blob[i:i + CS] for i in range(0, len(blob), CS)]
    hexes = tuple(hashlib.sha256(p).hexdigest() for p in parts)
    return (ChunkIndex(digest="sha256:" + hashlib.sha256(blob).hexdigest(), size=len(blob), chunk_size=CS,
                       chunks=hexes), dict(zip(hexes, parts, strict=True)))


class Server:
    def __init__(self):
        self.chunks: dict[str, bytes] = {}
        self.calls: list[str] = []
        self.fail = 0  # fail this many next calls
        self.lock = threading.Lock()

    def fetch(self, hexd: str) -> bytes:
        with self.lock:
            self.calls.append(hexd)
            if self.fail:
                self.fail -= 1
                raise ConnectionError("down")
        time.sleep(0.01)
        return self.chunks[hexd]


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
    cache2 = ChunkCache(str(tmp_path / "b"), lambda h: b"wrong", max_bytes=1 << 30, deadline_s=0.2, backoff_s=0.01)
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
