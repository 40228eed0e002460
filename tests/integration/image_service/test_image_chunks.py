"""Chunk store, chunk indexes and the chunk endpoints, against the real app (TestClient)."""

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral_image_service.app import create_app
from corral_image_service.settings import ImageServiceSettings

FILES = {"bin/hello": "#!/bin/sh\necho hello\n", "etc/os-release": "ID=corral-test\n"}


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
    return root


def tar_of(root: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.add(root, arcname=".")
    return buf.getvalue()


def upload(client: TestClient, body: bytes, *, kind="base", name="base", version="1"):
    return client.post("/v1/layers", params={"kind": kind, "name": name, "version": version},
                       content=body, headers={"Content-Type": "application/x-tar"})


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def client(data_dir: Path):
    settings = ImageServiceSettings(data_dir=str(data_dir), database_url="", log_json=False,
                                    log_level="WARNING", chunk_size_kb=64)
    with TestClient(create_app(settings)) as c:
        yield c


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
