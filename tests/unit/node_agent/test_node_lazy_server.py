"""The lazy-layer server's requests and the agent's end of it, without FUSE (the process
itself: tests/integration/node_agent/test_node_lazy.py)."""

import hashlib

import pytest

from corral_node_agent.layers.lazy.chunks import ChunkIndex
from corral_node_agent.layers.lazy.control import LayerServerClient, ServerUnavailable
from corral_node_agent.layers.lazy.server_main import LayerServer


def test_the_server_counts_the_cached_chunks_of_each_layer(tmp_path):
    server = LayerServer(str(tmp_path), {"image_service_url": "http://unused", "cache_mb": 64, "fetch_deadline_s": 1.0})
    # A lazy layer of 3 chunks (4096, 4096, 1000 bytes); the last two are cached.
    chunks = [hashlib.sha256(bytes([i])).hexdigest() for i in range(3)]
    lazy = "sha256:" + "a" * 64
    server.indexes[lazy] = ChunkIndex(digest=lazy, size=9192, chunk_size=4096, chunks=tuple(chunks))
    server.chunks._store(chunks[1], b"y" * 4096)
    server.chunks._store(chunks[2], b"z" * 1000)
    empty = "sha256:" + "b" * 64
    server.indexes[empty] = ChunkIndex(digest=empty, size=10, chunk_size=4096, chunks=(hashlib.sha256(b"n").hexdigest(),))
    reply = server._do(None, None, {"op": "stats"})
    assert reply["held"] == {lazy: 4096 + 1000, empty: 0}
    assert reply["stats"]["written_bytes"] == 5096
    server.http.close()


def test_a_request_to_no_server_fails_at_once(tmp_path):
    client = LayerServerClient(str(tmp_path), {}, on_event=lambda e: None, on_exit=lambda pid: None)
    with pytest.raises(ServerUnavailable):
        client.request("stats", timeout=1.0)
    client.close()  # nothing attached: a no-op
