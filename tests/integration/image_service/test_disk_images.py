"""VM disk images against the real app (TestClient), real qemu-img, a tmp data dir and SQLite."""

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral_image_service.app import create_app
from tests.integration.image_service.helpers import image_settings

pytestmark = pytest.mark.skipif(shutil.which("qemu-img") is None, reason="needs qemu-img (apt qemu-utils)")

MiB = 1024 * 1024


def qemu_img(*args: str) -> None:
    subprocess.run(["qemu-img", *args], check=True, capture_output=True)


def qcow2_with_data(path: Path, virtual_mb: int, payload: bytes) -> bytes:
    """A real qcow2 whose first bytes (guest view) are ``payload``."""
    raw = path.with_suffix(".src.raw")
    raw.write_bytes(payload)
    os.truncate(raw, virtual_mb * MiB)
    qemu_img("convert", "-f", "raw", "-O", "qcow2", str(raw), str(path))
    raw.unlink()
    return path.read_bytes()


def upload(client: TestClient, body, *, name="desktop", version="1", fmt="qcow2"):
    return client.post("/v1/disk-images", params={"name": name, "version": version, "format": fmt},
                       content=body, headers={"Content-Type": "application/octet-stream"})


def stored_blobs(data_dir: Path) -> set[str]:
    return {p.name for p in (data_dir / "blobs" / "sha256").iterdir()}


def test_qcow2_upload_is_served_as_a_blob_and_named_immutably(client, data_dir, tmp_path):
    body = qcow2_with_data(tmp_path / "v1.qcow2", 64, b"boot sector v1")
    r = upload(client, body)
    assert r.status_code == 201, r.text
    image = r.json()
    assert set(image) == {"name", "version", "digest", "format", "size_bytes", "virtual_size_bytes", "created_at"}
    assert image["digest"] == "sha256:" + hashlib.sha256(body).hexdigest()
    assert (image["format"], image["size_bytes"], image["virtual_size_bytes"]) == ("qcow2", len(body), 64 * MiB)

    # Content-addressed in the blob store: the node downloads it like a layer, Range included.
    blob = client.get(f"/v1/blobs/{image['digest']}")
    assert blob.status_code == 200 and blob.content == body
    part = client.get(f"/v1/blobs/{image['digest']}", headers={"Range": "bytes=0-3"})
    assert part.status_code == 206 and part.content == b"QFI\xfb"

    assert client.get("/v1/disk-images/desktop/1").json() == image
    assert client.get("/v1/disk-images/desktop").json() == image
    assert client.get("/v1/disk-images").json() == [image]

    again = upload(client, body)
    assert again.status_code == 200 and again.json() == image

    other = qcow2_with_data(tmp_path / "v2.qcow2", 64, b"boot sector v2")
    r = upload(client, other)
    assert r.status_code == 409
    err = r.json()["error"]
    assert err["code"] == "disk_image_exists" and err["existing"]["digest"] == image["digest"]

    v2 = upload(client, other, version="2").json()
    assert client.get("/v1/disk-images/desktop").json() == v2  # the latest version
    assert client.get("/v1/disk-images/desktop/1").json() == image
    assert [i["version"] for i in client.get("/v1/disk-images").json()] == ["1", "2"]
    assert list((data_dir / "tmp").iterdir()) == []


def test_raw_upload(client, tmp_path):
    body = b"\xeb\x63\x90" + bytes(2 * MiB - 3)
    r = upload(client, body, name="android-x86", fmt="raw")
    assert r.status_code == 201, r.text
    assert (r.json()["format"], r.json()["virtual_size_bytes"]) == ("raw", 2 * MiB)


def test_backing_file_pointing_at_a_host_file_is_refused(client, data_dir, tmp_path):
    evil = tmp_path / "evil.qcow2"
    # -u: do not open the backing file now; the image just names it.
    qemu_img("create", "-f", "qcow2", "-u", "-b", "/etc/shadow", "-F", "raw", str(evil), "16M")
    r = upload(client, evil.read_bytes(), name="evil")
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "disk_image_backing_file"
    assert "/etc/shadow" in err["message"] and "qemu-img convert" in err["message"]
    assert client.get("/v1/disk-images").json() == []
    assert stored_blobs(data_dir) == set() and list((data_dir / "tmp").iterdir()) == []


def test_external_data_file_is_refused(client, tmp_path):
    img = tmp_path / "split.qcow2"
    qemu_img("create", "-f", "qcow2", "-o", f"data_file={tmp_path / 'data.raw'}", str(img), "1M")
    r = upload(client, img.read_bytes(), name="split")
    assert r.status_code == 422 and r.json()["error"]["code"] == "disk_image_data_file"


def test_declared_format_must_match(client, tmp_path):
    qcow2 = qcow2_with_data(tmp_path / "a.qcow2", 8, b"x")
    r = upload(client, qcow2, fmt="raw")
    # A raw image whose bytes are a qcow2 header would be read as qcow2 by anything probing.
    assert r.status_code == 422 and r.json()["error"]["code"] == "disk_format_mismatch"
    r = upload(client, bytes(MiB), fmt="qcow2")
    assert r.status_code == 422 and r.json()["error"]["code"] == "disk_format_mismatch"
    r = upload(client, qcow2, fmt="vmdk")
    assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["query", "format"]
    assert upload(client, b"").json()["error"]["code"] == "empty_body"
    assert client.get("/v1/disk-images").json() == []


def test_upload_limit_413(data_dir):
    body = bytes(2 * MiB)
    with TestClient(create_app(image_settings(data_dir, max_disk_image_mb=1))) as c:
        r = upload(c, body, fmt="raw")
        assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"

        # Chunked: no Content-Length, so the bound is enforced while streaming.
        r = upload(c, (body[i:i + 256 * 1024] for i in range(0, len(body), 256 * 1024)), fmt="raw")
        assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
        assert list((data_dir / "tmp").iterdir()) == []
        assert c.get("/v1/disk-images").json() == []


def test_unknown_disk_image_404(client):
    for path in ("/v1/disk-images/nope", "/v1/disk-images/nope/1"):
        r = client.get(path)
        assert r.status_code == 404 and r.json()["error"]["code"] == "disk_image_not_found"
