"""Chunk store, chunk indexes and the chunk endpoints, against the real app (TestClient)."""

import hashlib
import os
from pathlib import Path

import pytest

from tests.integration.image_service.helpers import FILES, make_tree, tar_of, upload


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
