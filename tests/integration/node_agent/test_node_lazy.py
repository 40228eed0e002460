"""Lazy layers end to end: LayerCache (lazy) + the FUSE file + a real EROFS mount.

image-service is a small HTTP server serving what its chunk store holds (built with the real
chunking code), so the tests can count chunk requests and take the service down at will; the
chunks are fetched by the lazy-layer server, a process of its own (``layers.lazy.server_main``).
Needs root and /dev/fuse (the conftest enters a private mount namespace).
"""

import asyncio
import contextlib
import errno
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import time
from collections.abc import Iterator

import pytest

from corral_host.mounts import bind_mount, mountpoints, umount
from corral_node_agent.errors import ImageUnavailable
from corral_node_agent.layers import mounts
from tests.integration.node_agent.fake_image_service import CHUNK, FakeImageService, ServedLayer
from tests.polling import exited

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse")


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


def _add_layer(svc: FakeImageService, name: str, seed: int, files: int = 40,
               size: int = 48 * 1024) -> tuple[ServedLayer, str]:
    tree = f"{svc.work}/{name}-tree"
    _write_tree(tree, seed, files, size)
    return svc.add_tree(name, tree), tree


@pytest.fixture(scope="module")
def image_service(work_dir):
    svc = FakeImageService(f"{work_dir}/lazy-image-service")
    base, base_tree = _add_layer(svc, "base", 1)
    ws, ws_tree = _add_layer(svc, "ws", 2, files=120)
    server = svc.serve()
    yield svc, {"base": (base, base_tree), "ws": (ws, ws_tree)}
    server.shutdown()


@pytest.fixture
def fake(image_service):
    svc, layers = image_service
    svc.calls.clear()
    svc.down = False
    svc.tamper.clear()
    return svc, layers


def _mounts_under(path: str) -> list[str]:
    return [m for m in mountpoints() if m.startswith(path)]


@pytest.fixture
def new_cache(fake, layer_caches):
    """``new_cache(**settings)``: a LayerCache on the fake image-service (1 s fetch deadline)."""
    svc, _ = fake
    return lambda **kw: layer_caches(svc.url, **{"fetch_deadline_s": 1.0, **kw})


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
    assert max(cache.lazy.stats().fetched_digests.values()) == 1
    await cache.release([base, ws])


def _chunk_path(state_dir: str, h: str) -> str:
    return f"{state_dir}/layers/chunks/{h[:2]}/{h}"


def _eventually(cond, timeout_s: float = 10.0) -> bool:
    """Wait for a condition another process brings about (the lazy-layer server)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


async def test_only_touched_chunks_are_fetched(fake, new_cache, state_dir):
    svc, layers = fake
    ws, ws_tree = layers["ws"]
    total = len(set(ws.index["chunks"]))
    cache = new_cache()
    root = f"{state_dir}/layers/chunks"
    [mnt] = await cache.acquire([ws])
    with open(f"{mnt}/pkg3/sub1/file10.bin", "rb") as fh:  # noqa: ASYNC230
        data = fh.read()
    with open(f"{ws_tree}/pkg3/sub1/file10.bin", "rb") as fh:  # noqa: ASYNC230
        assert data == fh.read()
    fetched = svc.chunk_requests()
    # Superblock chunk + the file's chunks (48 KiB file, 64 KiB chunks) + metadata.
    assert len(fetched) == cache.lazy.stats().fetch_requests <= cache.lazy.stats().fetched <= 8 < total // 4
    assert len(os.listdir(root)) >= 1
    on_disk = sum(len(os.listdir(f"{root}/{d}")) for d in os.listdir(root))
    assert on_disk == cache.lazy.stats().fetched
    # Reading it again is served by the caches: no new request.
    with open(f"{mnt}/pkg3/sub1/file10.bin", "rb") as fh:  # noqa: ASYNC230
        fh.read()
    assert len(svc.chunk_requests()) == len(fetched)
    await cache.release([ws])


async def test_a_sequential_read_fetches_runs_and_reads_the_layer_exactly(fake, new_cache):
    svc, layers = fake
    ws, _ = layers["ws"]
    chunks = len(ws.index["chunks"])
    assert chunks >= 20
    cache = new_cache()
    [path] = await cache.ensure([ws])
    before = len(svc.chunk_requests())

    def read_all() -> bytes:
        with open(path, "rb") as fh:
            return b"".join(iter(lambda: fh.read(128 * 1024), b""))

    data = await asyncio.to_thread(read_all)
    with open(svc.blobs[ws.digest], "rb") as blob:  # noqa: ASYNC230
        assert data == blob.read()
    requests = len(svc.chunk_requests()) - before
    stats = cache.lazy.stats()
    # Read-ahead: runs of up to 8 chunks, each chunk fetched once, nothing beyond the layer.
    # (12-13 requests for 53 chunks on a quiet host; the kernel's FUSE
    # read-ahead sends some concurrently, and on a loaded host out of order, each of which
    # starts a window of 1 again: a full-suite run took 18. One request per chunk would be 53.)
    assert requests < chunks / 2, (requests, chunks)
    assert stats.readahead > chunks / 2 and max(stats.fetched_digests.values()) == 1
    assert stats.fetched == len(set(ws.index["chunks"]))
    assert any("/chunks?start=" in c for c in svc.chunk_requests())


async def test_random_reads_fetch_one_chunk_per_miss(fake, new_cache):
    svc, layers = fake
    ws, _ = layers["ws"]
    n = len(ws.index["chunks"])
    cache = new_cache()
    [path] = await cache.ensure([ws])
    order = random.Random(5).sample(range(1, n), 12)

    def read_random() -> list[bytes]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no kernel readahead either
            return [os.pread(fd, 4096, i * CHUNK) for i in order]
        finally:
            os.close(fd)

    got = await asyncio.to_thread(read_random)
    with open(svc.blobs[ws.digest], "rb") as blob:  # noqa: ASYNC230
        want = blob.read()
    assert got == [want[i * CHUNK:i * CHUNK + 4096] for i in order]
    stats = cache.lazy.stats()
    assert stats.readahead == 0 and stats.fetch_requests == stats.fetched
    assert not any("/chunks?start=" in c for c in svc.chunk_requests())


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


async def test_eviction_never_removes_chunks_of_a_mounted_layer(fake, new_cache, no_idle_delay, state_dir):
    svc, layers = fake
    (base, base_tree), (ws, ws_tree) = layers["base"], layers["ws"]
    cache = new_cache(cache_mb=0)  # every unpinned chunk is evictable
    [mb] = await cache.acquire([base])
    [mw] = await cache.acquire([ws])
    assert _checksums(mb) == _checksums(base_tree)
    assert _checksums(mw) == _checksums(ws_tree)
    needed = set(base.index["chunks"]) | set(ws.index["chunks"])
    fetched = cache.lazy.stats().fetched_digests
    assert {f"sha256:{h}" for h in fetched} <= needed
    for h in fetched:
        assert os.path.exists(_chunk_path(state_dir, h)), "a mounted layer's chunk was evicted"
    await cache.release([ws])
    # Idle unmount -> the server sees the file released -> unpinned -> evicted (bound is 0).
    base_chunks = {c[7:] for c in base.index["chunks"]}
    assert await asyncio.to_thread(_eventually, lambda: cache.lazy.stats().evicted > 0)
    for h in fetched:
        assert os.path.exists(_chunk_path(state_dir, h)) == (h in base_chunks)
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
    stats = cache.lazy.stats()
    assert stats.retries >= 2 and stats.failures >= 1
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
    assert cache.lazy.stats().bad_downloads >= 1
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
    pid = cache.lazy.server.pid
    await cache.aclose()
    # Nothing mounted, no agent: the server (and what it verified) is gone.
    assert await asyncio.to_thread(exited, pid)
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
    stats = cache.lazy.stats()
    refetched = set(stats.fetched_digests)
    assert refetched & set(victims) and stats.corrupt >= len(refetched & set(victims))
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


def _file(i: int) -> str:
    return f"pkg{i % 7}/sub{i % 3}/file{i}.bin"  # as _write_tree names them


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _die(cache) -> None:
    """What a SIGKILL does to an agent's end of the lazy-layer server: its connections end,
    nothing else happens (no unmount, no stop)."""
    sock = cache.lazy.server._watch
    cache.lazy.server._watch = None  # our "dead" agent sees nothing more
    sock.shutdown(socket.SHUT_RDWR)  # (a close would not wake the thread blocked reading it)


@contextlib.contextmanager
def _sandbox_view(mnt: str, tmp_path) -> Iterator[str]:
    """A sandbox's own copy of a layer mount (a container's mount namespace holds one)."""
    view = f"{tmp_path}/sandbox-view"
    os.mkdir(view)
    bind_mount(mnt, view)
    try:
        yield view
    finally:
        umount(view)


async def test_an_agent_restart_keeps_serving_the_layer_and_reuses_its_server(fake, new_cache, state_dir, tmp_path):
    svc, layers = fake
    ws, ws_tree = layers["ws"]
    crashed = new_cache()
    [mnt] = await crashed.acquire([ws])  # never released: the agent dies with it mounted
    pid = crashed.lazy.server.pid
    assert not any(m.startswith(f"{state_dir}/layers/lazy") for m in mountpoints()), \
        "the FUSE mount lives in the server's namespace, not the agent's"
    with _sandbox_view(mnt, tmp_path) as sandbox:
        assert await asyncio.to_thread(_read, f"{sandbox}/{_file(1)}") == _read(f"{ws_tree}/{_file(1)}")
        _die(crashed)
        restarted = new_cache()
        restarted.cleanup_orphans()  # what SandboxManager.start() does: the old agent's mounts go
        assert _mounts_under(state_dir) == []
        # The adopted sandbox reads a file nobody read before: the server still serves it.
        before = len(svc.chunk_requests())
        assert await asyncio.to_thread(_read, f"{sandbox}/{_file(115)}") == _read(f"{ws_tree}/{_file(115)}")
        assert len(svc.chunk_requests()) > before
        # The new agent finds the running server instead of starting one.
        [again] = await restarted.acquire([ws])
        assert restarted.lazy.server.pid == pid
        assert restarted.lazy_layers_lost([ws]) == []  # what an adopted sandbox reads still works
        assert _checksums(again) == _checksums(ws_tree)
        await restarted.release([ws])


async def test_a_server_that_died_while_no_agent_ran_is_named_by_the_next_agent(fake, new_cache, tmp_path):
    svc, layers = fake
    ws, ws_tree = layers["ws"]
    crashed = new_cache()
    [mnt] = await crashed.acquire([ws])
    with _sandbox_view(mnt, tmp_path) as sandbox:
        pid = crashed.lazy.server.pid
        _die(crashed)
        os.kill(pid, signal.SIGKILL)  # ... and then its server, with no agent to see it
        assert await asyncio.to_thread(exited, pid)
        restarted = new_cache()
        restarted.cleanup_orphans()
        # The restarted agent holds the layer again for the sandbox it adopts: from a new server,
        # so that sandbox's own mount of it (on the dead server's file) is lost, and said so.
        await restarted.acquire([ws])
        assert restarted.lazy.server.pid not in (None, pid)
        assert restarted.lazy_layers_lost([ws]) == [ws.digest]
        with pytest.raises(OSError) as exc:
            await asyncio.to_thread(_read, f"{sandbox}/{_file(113)}")
        assert exc.value.errno in (errno.EIO, errno.ENOTCONN)
        await restarted.release([ws])


async def test_a_killed_server_fails_reads_and_its_sandboxes_never_hang(fake, new_cache, tmp_path):
    svc, layers = fake
    ws, ws_tree = layers["ws"]
    cache = new_cache()
    faults: list[tuple[str, str]] = []
    cache.add_fault_listener(lambda digest, err: faults.append((digest, err)))
    [mnt] = await cache.acquire([ws])
    with _sandbox_view(mnt, tmp_path) as sandbox:
        pid = cache.lazy.server.pid
        os.kill(pid, signal.SIGKILL)
        assert await asyncio.to_thread(exited, pid)
        # A block never read before: an I/O error at once, not a hang.
        with pytest.raises(OSError) as exc:
            await asyncio.to_thread(_read, f"{sandbox}/{_file(111)}")
        assert exc.value.errno in (errno.EIO, errno.ENOTCONN)
        # The agent noticed: the layer's sandboxes are failed with a clear reason.
        assert await asyncio.to_thread(_eventually, lambda: bool(faults))
        await asyncio.sleep(0)  # the listeners run on this loop
        assert faults[0][0] == ws.digest and f"lazy-layer server (pid {pid}) exited" in faults[0][1]
        assert cache.lazy.indexes == {}
        # The next sandbox on the layer gets a new server and a fresh mount.
        [again] = await cache.acquire([ws])
        assert again == mnt and cache.lazy.server.pid not in (None, pid)
        assert _checksums(again) == _checksums(ws_tree)
        await cache.release([ws])
        await cache.release([ws])
