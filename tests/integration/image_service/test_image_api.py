"""The image-service HTTP API against the real app (TestClient), a tmp data dir and SQLite."""

import hashlib
import io
import os
import tarfile
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral_image_service.app import create_app
from tests.integration.image_service.helpers import FILES, image_settings, make_tree, tar_of, upload


def blob_files(data_dir: Path) -> set[str]:
    return {p.name for p in (data_dir / "blobs" / "sha256").iterdir()}


def test_health_and_docs(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/layers", "/v1/layers/{name}/{version}", "/v1/environments", "/v1/environments/{name}",
            "/v1/blobs/{digest}"} <= set(paths)


def test_upload_tar_creates_layer_and_blob(client, data_dir, tmp_path):
    r = upload(client, tar_of(make_tree(tmp_path / "t", FILES)), name="busybox", version="1.35")
    assert r.status_code == 201, r.text
    layer = r.json()
    assert set(layer) == {"owner", "kind", "name", "version", "ref", "digest", "size", "created_at"}
    assert layer["kind"] == "base" and layer["ref"] == "busybox:1.35"
    hexd = layer["digest"].removeprefix("sha256:")
    blob = data_dir / "blobs" / "sha256" / hexd
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == hexd
    assert blob.stat().st_size == layer["size"]
    assert client.get("/v1/layers/busybox/1.35").json() == layer
    # Nothing left behind from the spool file or the extracted tree.
    assert list((data_dir / "tmp").iterdir()) == []


def test_digest_is_reproducible(client, tmp_path):
    a = make_tree(tmp_path / "a", FILES)
    time.sleep(1.1)  # different mtimes, different creation order, different inode numbers
    b = make_tree(tmp_path / "b", FILES, reverse=True)
    d1 = upload(client, tar_of(a), name="a", version="1").json()["digest"]
    d2 = upload(client, tar_of(b), name="b", version="1").json()["digest"]
    d3 = client.post("/v1/layers", params={"kind": "base", "name": "c", "version": "1",
                                           "source_dir": str(b)}).json()["digest"]
    assert d1 == d2 == d3


def test_identical_reupload_is_200_conflicting_is_409(client, data_dir, tmp_path):
    body = tar_of(make_tree(tmp_path / "t", FILES))
    first = upload(client, body)
    assert first.status_code == 201
    again = upload(client, body)
    assert again.status_code == 200 and again.json() == first.json()

    other = tar_of(make_tree(tmp_path / "u", {**FILES, "etc/os-release": "ID=changed\n"}))
    r = upload(client, other)
    assert r.status_code == 409
    err = r.json()["error"]
    assert err["code"] == "layer_exists" and err["existing"]["digest"] == first.json()["digest"]
    assert client.get("/v1/layers/base/1").json() == first.json()

    # Same bytes but claimed as another kind is also a different layer.
    assert upload(client, body, kind="toolkit").status_code == 409


def test_list_and_filter_layers(client, tmp_path):
    body = tar_of(make_tree(tmp_path / "t", FILES))
    upload(client, body, kind="base", name="b", version="1")
    upload(client, body, kind="toolkit", name="t", version="1")
    assert [x["ref"] for x in client.get("/v1/layers").json()] == ["b:1", "t:1"]
    assert [x["ref"] for x in client.get("/v1/layers", params={"kind": "toolkit"}).json()] == ["t:1"]
    assert client.get("/v1/layers", params={"kind": "nope"}).status_code == 422


@pytest.mark.parametrize("params,loc", [
    ({"kind": "base", "name": "Bad", "version": "1"}, ["query", "name"]),
    ({"kind": "base", "name": "ok", "version": "-1"}, ["query", "version"]),
    ({"kind": "rootfs", "name": "ok", "version": "1"}, ["query", "kind"]),
    ({"kind": "base", "version": "1"}, ["query", "name"]),
])
def test_layer_params_validated(client, params, loc):
    r = client.post("/v1/layers", params=params, content=b"x", headers={"Content-Type": "application/x-tar"})
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["loc"] == loc


def test_unknown_layer_404(client):
    r = client.get("/v1/layers/nope/1")
    assert r.status_code == 404 and r.json()["error"]["code"] == "layer_not_found"


def test_bad_bodies(client, tmp_path):
    assert upload(client, b"").json()["error"]["code"] == "empty_body"
    r = upload(client, b"definitely not a tar" * 100)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_tar"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        ti = tarfile.TarInfo("../../escape")
        tf.addfile(ti, io.BytesIO(b""))
    r = upload(client, buf.getvalue())
    assert r.status_code == 422 and r.json()["error"]["code"] == "unsafe_tar"
    r = client.post("/v1/layers", params={"kind": "base", "name": "x", "version": "1"}, content=b"{}",
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 415


def test_gzip_tar_accepted(client, tmp_path):
    tree = make_tree(tmp_path / "t", FILES)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(tree, arcname=".")
    plain = upload(client, tar_of(tree), name="plain").json()["digest"]
    r = upload(client, buf.getvalue(), name="gz")
    assert r.status_code == 201 and r.json()["digest"] == plain


def test_source_dir_rules(data_dir, tmp_path):
    tree = make_tree(tmp_path / "t", FILES)
    params = {"kind": "base", "name": "x", "version": "1"}
    with TestClient(create_app(image_settings(data_dir, allow_source_dir=False))) as c:
        r = c.post("/v1/layers", params={**params, "source_dir": str(tree)})
        assert r.status_code == 403 and r.json()["error"]["code"] == "source_dir_disabled"
    with TestClient(create_app(image_settings(data_dir))) as c:
        for bad in ("relative/path", str(tmp_path / "missing"), str(tree / "bin/hello")):
            r = c.post("/v1/layers", params={**params, "source_dir": bad})
            assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["query", "source_dir"]


def test_upload_limit_413(data_dir, tmp_path):
    tree = make_tree(tmp_path / "t", FILES)
    (tree / "big").write_bytes(os.urandom(1536 * 1024))
    body = tar_of(tree)
    with TestClient(create_app(image_settings(data_dir, max_upload_mb=1))) as c:
        r = upload(c, body)
        assert r.status_code == 413
        assert r.json()["error"]["code"] == "payload_too_large"

        # Chunked upload: no Content-Length, so the limit is enforced while streaming.
        def chunks():
            for i in range(0, len(body), 64 * 1024):
                yield body[i:i + 64 * 1024]

        r = c.post("/v1/layers", params={"kind": "base", "name": "base", "version": "1"},
                   content=chunks(), headers={"Content-Type": "application/x-tar"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
        assert list((data_dir / "tmp").iterdir()) == []
        assert c.get("/v1/layers").json() == []


def _three_layers(client, tmp_path):
    body = lambda tag: tar_of(make_tree(tmp_path / tag, {f"opt/{tag}/marker": tag}))
    base = upload(client, body("base"), kind="base", name="debian", version="12").json()
    ws = upload(client, body("ws"), kind="workspace", name="ws", version="1").json()
    tk1 = upload(client, body("tk1"), kind="toolkit", name="py", version="3.11").json()
    tk2 = upload(client, body("tk2"), kind="toolkit", name="py", version="3.12").json()
    return base, ws, tk1, tk2


def test_environment_combinations(client, data_dir, tmp_path):
    base, ws, tk1, tk2 = _three_layers(client, tmp_path)
    spec = {"name": "py311", "base": "debian:12", "workspace": "ws:1", "toolkit": "py:3.11"}
    r = client.post("/v1/environments", json=spec)
    assert r.status_code == 201, r.text
    env = r.json()
    assert set(env) == {"owner", "name", "base", "workspace", "toolkit", "diffs", "layers", "config", "created_at"}
    assert [(x["kind"], x["digest"]) for x in env["layers"]] == [
        ("base", base["digest"]), ("workspace", ws["digest"]), ("toolkit", tk1["digest"])]
    assert set(env["layers"][0]) == {"kind", "name", "version", "digest", "size"}

    again = client.post("/v1/environments", json=spec)
    assert again.status_code == 200 and again.json() == env

    r = client.post("/v1/environments", json={**spec, "toolkit": "py:3.12"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "environment_exists"
    r = client.post("/v1/environments", json={"name": "py311", "base": "debian:12"})
    assert r.status_code == 409

    # A new toolkit version is a new environment over existing layers: nothing is built.
    blobs_before = blob_files(data_dir)
    r = client.post("/v1/environments", json={**spec, "name": "py312", "toolkit": "py:3.12"})
    assert r.status_code == 201
    assert [x["digest"] for x in r.json()["layers"]] == [base["digest"], ws["digest"], tk2["digest"]]
    assert blob_files(data_dir) == blobs_before

    minimal = client.post("/v1/environments", json={"name": "bare", "base": "debian:12"}).json()
    assert minimal["workspace"] is None and minimal["toolkit"] is None and len(minimal["layers"]) == 1

    assert [e["name"] for e in client.get("/v1/environments").json()] == ["bare", "py311", "py312"]
    assert client.get("/v1/environments/py311").json() == env


@pytest.mark.parametrize("body,loc,code", [
    ({"name": "e", "base": "nope:1"}, ["body", "base"], "unknown_layer"),
    ({"name": "e", "base": "debian:12", "toolkit": "py:9"}, ["body", "toolkit"], "unknown_layer"),
    ({"name": "e", "base": "py:3.11"}, ["body", "base"], "wrong_layer_kind"),
    ({"name": "e", "base": "debian:12", "workspace": "py:3.11"}, ["body", "workspace"], "wrong_layer_kind"),
    ({"name": "e", "base": "debian"}, ["body", "base"], "validation_error"),
    ({"name": "E!", "base": "debian:12"}, ["body", "name"], "validation_error"),
    ({"name": "e"}, ["body", "base"], "validation_error"),
    # A diff that is no name:version (the contract fuzzer's find: it was a 500).
    ({"name": "e", "base": "debian:12", "diffs": ["debian:12", "nodiff"]}, ["body", "diffs", 1], "validation_error"),
])
def test_environment_bad_refs_422(client, tmp_path, body, loc, code):
    _three_layers(client, tmp_path)
    r = client.post("/v1/environments", json=body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["details"][0]["loc"] == loc


def test_unknown_environment_404(client):
    r = client.get("/v1/environments/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "environment_not_found"


def test_blob_download_range_head(client, data_dir, tmp_path):
    layer = upload(client, tar_of(make_tree(tmp_path / "t", FILES))).json()
    digest = layer["digest"]
    blob = (data_dir / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()
    url = f"/v1/blobs/{digest}"

    full = client.get(url)
    assert full.status_code == 200 and full.content == blob
    assert full.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert full.headers["etag"] == f'"{digest}"'
    assert full.headers["accept-ranges"] == "bytes"

    part = client.get(url, headers={"Range": "bytes=0-9"})
    assert part.status_code == 206 and part.content == blob[:10]
    assert part.headers["content-range"] == f"bytes 0-9/{len(blob)}"
    tail = client.get(url, headers={"Range": "bytes=1024-"})
    assert tail.status_code == 206 and tail.content == blob[1024:]

    head = client.head(url)
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["content-length"]) == layer["size"]

    assert client.get("/v1/blobs/sha256:" + "0" * 64).status_code == 404
    assert client.head("/v1/blobs/sha256:" + "0" * 64).status_code == 404
    r = client.get("/v1/blobs/sha256:XYZ")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_digest"


def test_state_survives_restart(data_dir, tmp_path):
    body = tar_of(make_tree(tmp_path / "t", FILES))
    with TestClient(create_app(image_settings(data_dir))) as c:
        first = upload(c, body).json()
    with TestClient(create_app(image_settings(data_dir))) as c:  # migrations re-run as a no-op
        assert c.get("/v1/layers/base/1").json() == first
        assert upload(c, body).status_code == 200
