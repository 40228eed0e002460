"""The lazy-layer server's chunk client against the real image-service (uvicorn on loopback):
single chunks, runs cut by the index, errors, the internal token, and connection reuse."""

import random
import socket
import threading

import httpx
import pytest
import uvicorn

from corral_image_service.app import create_app
from corral_node_agent.layers.lazy.chunks import ChunkIndex
from corral_node_agent.layers.lazy.fetch import ChunkClient, ChunkFetchError
from tests.integration.image_service.helpers import image_settings, make_tree, tar_of
from tests.polling import until_sync

TOKEN = "lazy-fetch-token"  # noqa: S105 - a test's own token
HEADERS = {"X-Corral-Internal-Token": TOKEN}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def image_service(tmp_path_factory):
    data = tmp_path_factory.mktemp("fetch-image-service")
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(image_settings(data / "data", chunk_size_kb=64, internal_token=TOKEN)),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    until_sync(lambda: server.started, 30, "image-service started", interval_s=0.02)
    url = f"http://127.0.0.1:{port}"
    rnd = random.Random(3)
    files = {f"src/m{i}.txt": "".join(rnd.choice("abcdefghij \n") for _ in range(30_000)) for i in range(30)}
    tree = make_tree(data / "tree", files)
    r = httpx.post(f"{url}/v1/layers", params={"kind": "base", "name": "fetch", "version": "1"},
                   content=tar_of(tree), headers=HEADERS, timeout=60)
    assert r.status_code == 201, r.text
    digest = r.json()["digest"]
    wire = httpx.get(f"{url}/v1/indexes/{digest}", headers=HEADERS).json()
    blob = httpx.get(f"{url}/v1/blobs/{digest}", headers=HEADERS).content
    index = ChunkIndex(digest=digest, size=wire["size"], chunk_size=wire["chunk_size"],
                       chunks=tuple(c[7:] for c in wire["chunks"]))
    yield url, index, blob
    server.should_exit = True
    thread.join(10)


def test_single_chunks_and_runs_are_the_blob(image_service):
    url, index, blob = image_service
    n = len(index.chunks)
    assert n >= 6
    client = ChunkClient(url, HEADERS, timeout_s=5, connect_timeout_s=2)
    try:
        for start, count in ((0, 1), (n - 1, 1), (1, 4), (n - 3, 3), (0, n)):
            got = list(client.fetch(index, start, count))
            assert len(got) == count
            assert b"".join(got) == blob[index.span(start)[0]:sum(index.span(start + count - 1))]
        # All of it over the one keep-alive connection of this thread.
        assert len(client._all) == 1
    finally:
        client.close()


def test_errors_raise_and_the_connection_stays_usable(image_service):
    url, index, blob = image_service
    client = ChunkClient(url, HEADERS, timeout_s=5, connect_timeout_s=2)
    bad = ChunkIndex(digest=index.digest, size=index.size, chunk_size=index.chunk_size,
                     chunks=("0" * 64, *index.chunks[1:]))
    try:
        with pytest.raises(ChunkFetchError, match="404"):
            list(client.fetch(bad, 0, 1))
        past = ChunkIndex(digest=index.digest, size=index.size + index.chunk_size, chunk_size=index.chunk_size,
                          chunks=(*index.chunks, index.chunks[0]))
        with pytest.raises(ChunkFetchError, match="400"):
            list(client.fetch(past, len(index.chunks) - 1, 2))
        assert b"".join(client.fetch(index, 0, 2)) == blob[:2 * index.chunk_size]
        # A reader that stops halfway through a run leaves no half-read connection behind.
        run = client.fetch(index, 0, 3)
        next(run)
        run.close()
        assert b"".join(client.fetch(index, 2, 2)) == blob[2 * index.chunk_size:4 * index.chunk_size]
    finally:
        client.close()


def test_without_the_internal_token_chunks_are_refused(image_service):
    url, index, _ = image_service
    client = ChunkClient(url, {}, timeout_s=5, connect_timeout_s=2)
    try:
        for count in (1, 2):
            with pytest.raises(ChunkFetchError, match="401"):
                list(client.fetch(index, 0, count))
    finally:
        client.close()
