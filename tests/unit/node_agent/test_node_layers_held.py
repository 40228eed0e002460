"""What a node reports holding, per layer, for placement by locality (LayerCache.held_bytes)."""

import hashlib

from corral_node_agent.layers.cache import LayerCache
from corral_node_agent.layers.lazy.chunks import ChunkIndex
from corral_node_agent.settings import LayerSettings


def test_whole_blobs_and_cached_chunks_of_lazy_layers(tmp_path):
    cache = LayerCache(LayerSettings(state_dir=str(tmp_path), image_service_url="http://unused", mode="lazy",
                                     cache_mb=64, fetch_deadline_s=1.0, prefetch=False))
    eager_hex = "e" * 64
    (tmp_path / "layers/blobs").mkdir(parents=True, exist_ok=True)
    (tmp_path / "layers/blobs" / eager_hex).write_bytes(b"x" * 5000)
    (tmp_path / "layers/blobs" / f"{eager_hex}.part").write_bytes(b"partial")  # a download: not held
    # A lazy layer of 3 chunks (4096, 4096, 1000 bytes); the last two are cached.
    chunks = [hashlib.sha256(bytes([i])).hexdigest() for i in range(3)]
    lazy = "sha256:" + "a" * 64
    cache.lazy.indexes[lazy] = ChunkIndex(digest=lazy, size=9192, chunk_size=4096, chunks=tuple(chunks))
    cache.lazy.chunks._store(chunks[1], b"y" * 4096)
    cache.lazy.chunks._store(chunks[2], b"z" * 1000)
    cache.lazy.chunks._scan()
    # Another lazy layer with nothing cached is not reported at all.
    cache.lazy.indexes["sha256:" + "b" * 64] = ChunkIndex(digest="sha256:" + "b" * 64, size=10, chunk_size=4096,
                                                          chunks=(hashlib.sha256(b"n").hexdigest(),))
    assert cache.held_bytes() == {f"sha256:{eager_hex}": 5000, lazy: 4096 + 1000}
