"""Lazy layers end to end: LayerCache (lazy) + the FUSE file + a real EROFS mount.

image-service is a MockTransport serving what its chunk store holds (built with the real
chunking code), so the tests can count chunk requests and take the service down at will.
Needs root and /dev/fuse (the conftest enters a private mount namespace).
"""

import asyncio
import errno
import hashlib
import json
import os
import random
import shutil
import time

import httpx
import pytest

from corral_common.contracts.images import EnvironmentLayer
from corral_image_service.chunks.store import LocalChunkStore, chunk_blob
from corral_image_service.layers.erofs import mkfs_erofs
from corral_node_agent import host
from corral_node_agent.errors import ImageUnavailable
from corral_node_agent.layers import mounts

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse")

CHUNK = 64 * 1024


def _write_tree(root: str, seed: int, files: int, size: int) -> None:
    rnd = random.Random(seed)
    for i in range(files):
        d = f"{root}/pkg{i % 7}/sub{i % 3}"
        os.makedirs(d, exist_ok=True)
        with open(f"{d}/file{i}.bin", "wb") as fh:
            # Half random (incompressible), half text: like a repository.
            fh.write(rnd.randbytes(size // 2) + (f"line {i} " * (size // 16)).encode()[: size // 2])
    os.makedirs(f"{root}/empty", exist_ok=True)
    os.symlink("pkg0/sub0/file0.bin", f"{root}/link")


def _checksums(root: str) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = f"{dirpath}/{name}"
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = "link:" + os.readlink(p)
            else:
                with open(p, "rb") as fh:
                    out[rel] = hashlib.sha256(fh.read()).hexdigest()
        for name in dirnames:
            out[os.path.relpath(f"{dirpath}/{name}", root) + "/"] = "dir"
    return out


class ServedLayer(EnvironmentLayer):
    """A layer as an environment lists it, with the chunk index the fake serves for it."""

    index: dict


class FakeImageService:
    """The subset of image-service a node uses, with request counts and faults."""

    def __init__(self, work: str):
        self.work = work
        self.blobs: dict[str, str] = {}
        self.store = LocalChunkStore(f"{work}/chunkstore")
        self.store.ensure_dirs()
        self.calls: list[str] = []
        self.down = False
        self.tamper: set[str] = set()  # chunk digests answered with wrong bytes

    def add_layer(self, name: str, seed: int, files: int = 40, size: int = 48 * 1024) -> tuple["ServedLayer", str]:
        tree = f"{self.work}/{name}-tree"
        _write_tree(tree, seed, files, size)
        blob = f"{self.work}/{name}.erofs"
        mkfs_erofs(tree, blob)
        with open(blob, "rb") as fh:
            digest = "sha256:" + hashlib.sha256(fh.read()).hexdigest()
        self.blobs[digest] = blob
        index, _ = chunk_blob(self.store, digest, blob, CHUNK)
        return ServedLayer(kind="base", name=name, version="1", digest=digest, size=index["size"], index=index), tree

    def chunk_requests(self) -> list[str]:
        return [c for c in self.calls if c.startswith("/v1/chunks/")]

    def transport(self) -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            path = request.url.path
            self.calls.append(path)
            if self.down:
                raise httpx.ConnectError("connection refused", request=request)
            if path.startswith("/v1/chunks/"):
                d = path.removeprefix("/v1/chunks/")
                p = self.store.chunk_path(d)
                if p is None:
                    return httpx.Response(404)
                data = p.read_bytes()
                if d in self.tamper:
                    data = b"\0" + data[1:]
                return httpx.Response(200, content=data)
            if path.startswith("/v1/indexes/"):
                d = path.removeprefix("/v1/indexes/")
                index = self.store.get_index(d)
                return httpx.Response(200, json=index) if index else httpx.Response(404)
            if path.startswith("/v1/blobs/"):
                d = path.removeprefix("/v1/blobs/")
                if d in self.blobs:
                    with open(self.blobs[d], "rb") as fh:
                        return httpx.Response(200, content=fh.read())
            return httpx.Response(404)

        return httpx.MockTransport(handler)


@pytest.fixture(scope="module")
def image_service(work_dir):
    svc = FakeImageService(f"{work_dir}/lazy-image-service")
    base, base_tree = svc.add_layer("base", 1)
    ws, ws_tree = svc.add_layer("ws", 2, files=120)
    return svc, {"base": (base, base_tree), "ws": (ws, ws_tree)}


@pytest.fixture
def fake(image_service):
    svc, layers = image_service
    svc.calls.clear()
    svc.down = False
    svc.tamper.clear()
    return svc, layers


def _mounts_under(path: str) -> list[str]:
    return [m for m in host.mountpoints() if m.startswith(path)]


@pytest.fixture
def new_cache(fake, layer_caches):
    """``new_cache(**settings)``: a LayerCache on the fake image-service (1 s fetch deadline)."""
    svc, _ = fake
    return lambda **kw: layer_caches("http://image-service", transport=svc.transport(), **{"fetch_deadline_s": 1.0, **kw})


@pytest.fixture
def no_idle_delay(monkeypatch):
    monkeypatch.setattr(mounts, "LAYER_IDLE_UNMOUNT_S", 0.01)


async def test_lazy_mount_reads_exactly_the_original_tree(fake, new_cache):
    svc, layers = fake
    cache = new_cache()
    (base, base_tree), (ws, ws_tree) = layers["base"], layers["ws"]
    paths = await cache.ensure([base, ws])
    assert paths == [cache.lazy.path(base.digest), cache.lazy.path(ws.digest)]
    assert os.path.getsize(paths[1]) == ws.index["size"]
    # Before start: the index and the superblock's chunk only.
    assert len(svc.chunk_requests()) == 2
    mounts = await cache.acquire([base, ws])
    assert _checksums(mounts[0]) == _checksums(base_tree)
    assert _checksums(mounts[1]) == _checksums(ws_tree)
    # The whole lazy file equals the blob.
    with open(paths[1], "rb") as fh, open(svc.blobs[ws.digest], "rb") as blob:  # noqa: ASYNC230
        assert fh.read() == blob.read()
    # Each chunk crossed the network once at most.
    assert max(cache.lazy.chunks.stats.fetched_digests.values()) == 1
    await cache.release([base, ws])


async def test_only_touched_chunks_are_fetched(fake, new_cache):
    svc, layers = fake
    ws, ws_tree = layers["ws"]
    total = len(set(ws.index["chunks"]))
    cache = new_cache()
    chunks = cache.lazy.chunks
    [mnt] = await cache.acquire([ws])
    with open(f"{mnt}/pkg3/sub1/file10.bin", "rb") as fh:  # noqa: ASYNC230
        data = fh.read()
    with open(f"{ws_tree}/pkg3/sub1/file10.bin", "rb") as fh:  # noqa: ASYNC230
        assert data == fh.read()
    fetched = svc.chunk_requests()
    # Superblock chunk + the file's chunks (48 KiB file, 64 KiB chunks) + metadata.
    assert len(fetched) == chunks.stats.fetched <= 8 < total // 4
    assert len(os.listdir(chunks.root)) >= 1
    on_disk = sum(len(os.listdir(f"{chunks.root}/{d}")) for d in os.listdir(chunks.root))
    assert on_disk == len(fetched)
    # Reading it again is served by the caches: no new request.
    with open(f"{mnt}/pkg3/sub1/file10.bin", "rb") as fh:  # noqa: ASYNC230
        fh.read()
    assert len(svc.chunk_requests()) == len(fetched)
    await cache.release([ws])


async def test_concurrent_starts_share_one_index_fetch(fake, new_cache):
    svc, layers = fake
    base, _ = layers["base"]
    cache = new_cache()
    results = await asyncio.gather(*(cache.acquire([base]) for _ in range(8)))
    assert len({tuple(r) for r in results}) == 1
    assert svc.calls.count(f"/v1/indexes/{base.digest}") == 1
    assert cache.refcount(base.digest) == 8
    for _ in range(8):
        await cache.release([base])


async def test_eviction_never_removes_chunks_of_a_mounted_layer(fake, new_cache, no_idle_delay):
    svc, layers = fake
    (base, base_tree), (ws, ws_tree) = layers["base"], layers["ws"]
    cache = new_cache(cache_mb=0)  # every unpinned chunk is evictable
    chunks = cache.lazy.chunks
    [mb] = await cache.acquire([base])
    [mw] = await cache.acquire([ws])
    assert _checksums(mb) == _checksums(base_tree)
    assert _checksums(mw) == _checksums(ws_tree)
    needed = set(base.index["chunks"]) | set(ws.index["chunks"])
    assert {f"sha256:{h}" for h in chunks.stats.fetched_digests} <= needed
    for h in chunks.stats.fetched_digests:
        assert os.path.exists(chunks.path(h)), "a mounted layer's chunk was evicted"
    await cache.release([ws])
    await asyncio.sleep(0.2)  # idle unmount -> unpinned -> evicted (bound is 0)
    base_chunks = {c[7:] for c in base.index["chunks"]}
    for h in chunks.stats.fetched_digests:
        assert os.path.exists(chunks.path(h)) == (h in base_chunks)
    assert chunks.stats.evicted > 0
    # The still-mounted layer reads fine.
    assert _checksums(mb) == _checksums(base_tree)
    await cache.release([base])


async def test_image_service_down_mid_read_gives_eio_not_a_hang(fake, new_cache):
    svc, layers = fake
    ws, ws_tree = layers["ws"]
    faults = []
    cache = new_cache(fetch_deadline_s=1.0)
    cache.add_fault_listener(lambda digest, err: faults.append(digest))
    [mnt] = await cache.acquire([ws])
    svc.down = True
    t0 = time.monotonic()

    def read() -> bytes:
        with open(f"{mnt}/pkg5/sub2/file110.bin", "rb") as fh:
            return fh.read()

    with pytest.raises(OSError) as exc:
        await asyncio.to_thread(read)
    assert exc.value.errno == errno.EIO
    assert time.monotonic() - t0 < 10
    assert cache.lazy.chunks.stats.retries >= 2 and cache.lazy.chunks.stats.failures >= 1
    await asyncio.sleep(0.05)
    assert faults and set(faults) == {ws.digest} and ws.digest in cache.lazy.faults
    # Back up: the same read now succeeds with the right bytes.
    svc.down = False
    data = await asyncio.to_thread(read)
    with open(f"{ws_tree}/pkg5/sub2/file110.bin", "rb") as fh:  # noqa: ASYNC230
        assert data == fh.read()
    await cache.release([ws])


async def test_wrong_bytes_from_image_service_are_never_served(fake, new_cache):
    svc, layers = fake
    ws, ws_tree = layers["ws"]
    cache = new_cache(fetch_deadline_s=0.5)
    [mnt] = await cache.acquire([ws])
    svc.tamper.update(ws.index["chunks"])
    with pytest.raises(OSError) as exc:
        await asyncio.to_thread(_checksums, mnt)
    assert exc.value.errno == errno.EIO
    assert cache.lazy.chunks.stats.bad_downloads >= 1
    svc.tamper.clear()
    assert await asyncio.to_thread(_checksums, mnt) == _checksums(ws_tree)
    await cache.release([ws])


async def test_corrupted_cached_chunk_is_detected_and_refetched(fake, new_cache, state_dir):
    svc, layers = fake
    ws, ws_tree = layers["ws"]
    cache = new_cache()
    [mnt] = await cache.acquire([ws])
    assert _checksums(mnt) == _checksums(ws_tree)
    await cache.release([ws])
    await cache.aclose()
    # Flip a byte in every cached chunk of the layer (as a failing disk would).
    victims = [h for h in (c[7:] for c in ws.index["chunks"]) if os.path.exists(f"{state_dir}/layers/chunks/{h[:2]}/{h}")]
    assert victims
    for h in victims:
        p = f"{state_dir}/layers/chunks/{h[:2]}/{h}"
        os.chmod(p, 0o644)
        with open(p, "r+b") as fh:  # noqa: ASYNC230
            b = fh.read(1)
            fh.seek(0)
            fh.write(bytes([b[0] ^ 0xFF]))
    svc.calls.clear()
    cache = new_cache()  # a restarted agent: same cache directory
    [mnt] = await cache.acquire([ws])
    assert _checksums(mnt) == _checksums(ws_tree)
    # Every corrupted chunk that was read again was detected and fetched anew (which
    # ones the kernel reads can vary slightly with readahead timing).
    refetched = set(cache.lazy.chunks.stats.fetched_digests)
    assert refetched & set(victims) and cache.lazy.chunks.stats.corrupt >= len(refetched & set(victims))
    for h in refetched:
        with open(f"{state_dir}/layers/chunks/{h[:2]}/{h}", "rb") as fh:  # noqa: ASYNC230
            assert hashlib.sha256(fh.read()).hexdigest() == h
    await cache.release([ws])


async def test_image_service_down_before_start_is_image_unavailable(fake, new_cache):
    svc, layers = fake
    ws, _ = layers["ws"]
    svc.down = True
    cache = new_cache(fetch_deadline_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(ImageUnavailable):
        await cache.acquire([ws])
    assert time.monotonic() - t0 < 5
    assert cache.refcount(ws.digest) == 0


async def test_eager_mode_downloads_whole_blob(fake, new_cache):
    svc, layers = fake
    ws, ws_tree = layers["ws"]
    cache = new_cache(mode="eager")
    [mnt] = await cache.acquire([ws])
    assert _checksums(mnt) == _checksums(ws_tree)
    assert svc.chunk_requests() == [] and svc.calls == [f"/v1/blobs/{ws.digest}"]
    assert os.path.getsize(cache.store.path(ws.digest)) == ws.index["size"]
    await cache.release([ws])


async def test_blob_without_index_falls_back_to_eager(fake, new_cache, state_dir):
    svc, layers = fake
    base, base_tree = layers["base"]
    index_file = svc.store._index_path(base.digest)
    saved = index_file.read_bytes()
    index_file.unlink()
    try:
        cache = new_cache()
        [mnt] = await cache.acquire([base])
        assert _checksums(mnt) == _checksums(base_tree)
        assert os.path.exists(cache.store.path(base.digest)) and svc.chunk_requests() == []
        await cache.release([base])
        await cache.aclose()
    finally:
        index_file.write_bytes(saved)
    json.loads(saved)
    shutil.rmtree(state_dir, ignore_errors=True)


async def test_restart_after_crash_leaves_no_stale_fuse_mount(fake, new_cache, state_dir):
    svc, layers = fake
    ws, ws_tree = layers["ws"]
    crashed = new_cache()  # closed (its threads and device fd: this process lives on) after restarted
    await crashed.acquire([ws])  # never released: the agent "dies" here
    assert any(m.startswith(f"{state_dir}/layers/lazy") for m in host.mountpoints())
    restarted = new_cache()
    restarted.cleanup_orphans()  # what SandboxManager.start() does
    assert _mounts_under(state_dir) == []
    # The restarted agent serves the layer again, reusing the chunks already on disk.
    had = {f"/v1/chunks/sha256:{h}" for h in crashed.lazy.chunks.stats.fetched_digests}
    svc.calls.clear()
    [mnt] = await restarted.acquire([ws])
    assert _checksums(mnt) == _checksums(ws_tree)
    assert had and not had & set(svc.chunk_requests())
    await restarted.release([ws])
