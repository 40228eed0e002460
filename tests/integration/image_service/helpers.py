"""Helpers of the image-service tests: settings for a tmp data dir, layer trees, tars, uploads."""

import io
import os
import tarfile
from pathlib import Path

from fastapi.testclient import TestClient

from corral_image_service.settings import ImageServiceSettings

FILES = {"bin/hello": "#!/bin/sh\necho hello\n", "etc/os-release": "ID=corral-test\n"}


def image_settings(data_dir: Path, **kw) -> ImageServiceSettings:
    """An image-service on ``data_dir`` with SQLite there, quiet logs, and ``kw`` on top."""
    return ImageServiceSettings(data_dir=str(data_dir), database_url="", log_json=False, log_level="WARNING", **kw)


def make_tree(root: Path, files: dict[str, str], reverse: bool = False) -> Path:
    """A rootfs-like tree of ``files`` (path -> text) with a sticky /tmp; ``reverse`` writes
    them in the other order (the digest must not depend on it)."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    for rel, content in sorted(files.items(), reverse=reverse):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
    (root / "tmp").mkdir(exist_ok=True)
    os.chmod(root / "tmp", 0o1777)
    return root


def tar_of(root: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.add(root, arcname=".")
    return buf.getvalue()


def upload(client: TestClient, body: bytes, *, kind="base", name="base", version="1"):
    """POST a layer tar."""
    return client.post("/v1/layers", params={"kind": kind, "name": name, "version": version},
                       content=body, headers={"Content-Type": "application/x-tar"})
