"""Chunk store, chunk indexes and the chunk endpoints, against the real app (TestClient)."""

import hashlib
import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral_image_service.app import create_app
from tests.integration.image_service.helpers import FILES, image_settings, make_tree, tar_of, upload


@pytest.fixture
def settings_overrides() -> dict:
    return {"chunk_size_kb": 64}


def _tree_with_data(root: Path, seed: int, n: int = 20) -> Path:
    files = dict(FILES)
    rnd = __import__("random").Random(seed)
    for i in range(n):
        files[f"src/m{i}.txt"] = "".join(rnd.choice("abcdefghij \n") for _ in range(20_000))
    return make_tree(root, files)


def test_layer_is_chunked_at_creation(client, data_dir, tmp_path):
    layer = upload(client, tar_of(_tree_with_data(tmp_path / "t", 1)), name="ws", version="1").json()
    r = client.get(f"/v1/indexes/{layer['digest']}")
    assert r.status_code == 200, r.text
    assert "immutable" in r.headers["cache-control"]
    index = r.json()
    assert index["digest"] == layer["digest"] and index["size"] == layer["size"]
    assert index["chunk_size"] == 64 * 1024
    assert len(index["chunks"]) == -(-layer["size"] // index["chunk_size"]) > 1
    # The chunks, in order, are the blob.
    blob = b""
    for d in index["chunks"]:
        c = client.get(f"/v1/chunks/{d}")
        assert c.status_code == 200
        assert c.headers["x-corral-digest"] == d and c.headers["etag"] == f'"{d}"'
        assert "immutable" in c.headers["cache-control"]
        assert "sha256:" + hashlib.sha256(c.content).hexdigest() == d
        blob += c.content
    assert blob == client.get(f"/v1/blobs/{layer['digest']}").content
    assert client.head(f"/v1/chunks/{index['chunks'][0]}").status_code == 200


def test_chunk_errors(client):
    assert client.get("/v1/chunks/sha256:xyz").json()["error"]["code"] == "invalid_digest"
    r = client.get("/v1/chunks/sha256:" + "0" * 64)
    assert r.status_code == 404 and r.json()["error"]["code"] == "chunk_not_found"
    r = client.get("/v1/indexes/sha256:" + "0" * 64)
    assert r.status_code == 404 and r.json()["error"]["code"] == "blob_not_found"
    assert client.get("/v1/indexes/md5:1").status_code == 400


def test_index_backfilled_for_blob_stored_before_chunking(client, data_dir, tmp_path):
    layer = upload(client, tar_of(make_tree(tmp_path / "t", FILES))).json()
    hexd = layer["digest"][7:]
    index_file = data_dir / "chunks" / "indexes" / "sha256" / f"{hexd}.json"
    assert index_file.is_file()
    index_file.unlink()  # as if the blob predated chunking
    r = client.get(f"/v1/indexes/{layer['digest']}")
    assert r.status_code == 200 and r.json()["digest"] == layer["digest"]
    assert index_file.is_file()


def test_identical_chunks_stored_once_across_layers(client, data_dir, tmp_path):
    a = upload(client, tar_of(_tree_with_data(tmp_path / "a", 1)), kind="workspace", name="a", version="1").json()
    b = upload(client, tar_of(_tree_with_data(tmp_path / "b", 2)), kind="workspace", name="b", version="1").json()
    same = upload(client, tar_of(_tree_with_data(tmp_path / "c", 1)), kind="workspace", name="a", version="2").json()
    assert same["digest"] == a["digest"]
    ia = client.get(f"/v1/indexes/{a['digest']}").json()["chunks"]
    ib = client.get(f"/v1/indexes/{b['digest']}").json()["chunks"]
    stored = [p for p in (data_dir / "chunks" / "sha256").rglob("*") if p.is_file()]
    assert len(stored) == len(set(ia) | set(ib))
    assert not [p for p in stored if p.name.startswith(".tmp-")]
    assert os.listdir(data_dir / "chunks" / "indexes" / "sha256").__len__() == 2


def test_a_run_of_chunks_is_the_blob_range_they_cover(client, tmp_path):
    layer = upload(client, tar_of(_tree_with_data(tmp_path / "t", 3)), name="run", version="1").json()
    index = client.get(f"/v1/indexes/{layer['digest']}").json()
    blob = client.get(f"/v1/blobs/{layer['digest']}").content
    n, size = len(index["chunks"]), index["chunk_size"]
    assert n >= 4
    for start, count in ((0, 1), (1, 3), (n - 2, 2), (0, n)):
        r = client.get(f"/v1/indexes/{layer['digest']}/chunks", params={"start": start, "count": count})
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/octet-stream"
        assert "immutable" in r.headers["cache-control"]
        assert r.content == blob[start * size:(start + count) * size]


def test_chunk_run_bad_input_is_a_json_4xx_with_loc(client, tmp_path):
    layer = upload(client, tar_of(_tree_with_data(tmp_path / "t", 4)), name="bad", version="1").json()
    n = len(client.get(f"/v1/indexes/{layer['digest']}").json()["chunks"])
    url = f"/v1/indexes/{layer['digest']}/chunks"
    cases = [
        (url, {"start": n, "count": 1}, 400, ["query", "start"]),
        (url, {"start": n - 1, "count": 2}, 400, ["query", "count"]),
        (url, {"start": -1, "count": 1}, 422, ["query", "start"]),
        (url, {"start": 0, "count": 0}, 422, ["query", "count"]),
        (url, {"start": 0, "count": 65}, 422, ["query", "count"]),
        (url, {"start": "x", "count": 1}, 422, ["query", "start"]),
        (url, {"count": 1}, 422, ["query", "start"]),
        (url, {"start": 0, "count": 10**30}, 422, ["query", "count"]),
        ("/v1/indexes/sha256:xyz/chunks", {"start": 0, "count": 1}, 400, ["path", "digest"]),
        ("/v1/indexes/sha256:" + "0" * 64 + "/chunks", {"start": 0, "count": 1}, 404, ["path", "digest"]),
    ]
    for path, params, status, loc in cases:
        r = client.get(path, params=params)
        assert r.status_code == status, (params, r.text)
        assert r.json()["error"]["details"][0]["loc"] == loc, (params, r.text)


def test_chunk_run_over_the_byte_bound_is_refused(client, tmp_path, monkeypatch):
    from corral_image_service.chunks import router

    layer = upload(client, tar_of(_tree_with_data(tmp_path / "t", 5)), name="big", version="1").json()
    monkeypatch.setattr(router, "MAX_RUN_BYTES", 2 * 64 * 1024)
    url = f"/v1/indexes/{layer['digest']}/chunks"
    assert client.get(url, params={"start": 0, "count": 2}).status_code == 200
    r = client.get(url, params={"start": 0, "count": 3})
    assert r.status_code == 400 and r.json()["error"]["code"] == "run_too_large"
    assert r.json()["error"]["details"][0]["loc"] == ["query", "count"]


def test_chunk_run_needs_the_internal_token(data_dir):
    with TestClient(create_app(image_settings(data_dir, internal_token="s3cret"))) as c:
        r = c.get("/v1/indexes/sha256:" + "0" * 64 + "/chunks", params={"start": 0, "count": 1})
        assert r.status_code == 401
        r = c.get("/v1/indexes/sha256:" + "0" * 64 + "/chunks", params={"start": 0, "count": 1},
                  headers={"X-Corral-Internal-Token": "s3cret"})
        assert r.status_code == 404
