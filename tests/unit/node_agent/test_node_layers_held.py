"""What a node reports holding, per layer, for placement by locality (LayerCache.held_bytes)."""

from corral_node_agent.layers.cache import LayerCache
from corral_node_agent.layers.lazy.chunks import ChunkIndex
from corral_node_agent.settings import LayerSettings


def test_whole_blobs_and_what_the_lazy_layer_server_holds(tmp_path, monkeypatch):
    cache = LayerCache(LayerSettings(state_dir=str(tmp_path), image_service_url="http://unused", mode="lazy",
                                     cache_mb=64, fetch_deadline_s=1.0, prefetch=False))
    eager_hex = "e" * 64
    (tmp_path / "layers/blobs").mkdir(parents=True, exist_ok=True)
    (tmp_path / "layers/blobs" / eager_hex).write_bytes(b"x" * 5000)
    (tmp_path / "layers/blobs" / f"{eager_hex}.part").write_bytes(b"partial")  # a download: not held
    lazy = "sha256:" + "a" * 64
    cache.lazy.indexes[lazy] = ChunkIndex(digest=lazy, size=9192, chunk_size=4096, chunks=())
    # The server also knows layers of an earlier agent run this one has not prepared: not ours.
    monkeypatch.setattr(cache.lazy, "_ask_stats", lambda: {lazy: 5096, "sha256:" + "c" * 64: 10})
    assert cache.held_bytes() == {f"sha256:{eager_hex}": 5000, lazy: 5096}
