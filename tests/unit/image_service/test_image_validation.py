import re

import pytest
from pydantic import ValidationError

from corral_image_service.blobs.schemas import DIGEST_RE
from corral_image_service.blobs.service import BlobStore
from corral_image_service.environments.schemas import EnvironmentIn
from corral_image_service.layers.schemas import (
    NAME_PATTERN,
    REF_PATTERN,
    VERSION_PATTERN,
)
from corral_image_service.settings import ImageServiceSettings


@pytest.mark.parametrize("name,ok", [
    ("busybox", True), ("py3.12-tools", True), ("a", True), ("a" * 64, True), ("0base", True),
    ("a" * 65, False), ("Busybox", False), ("-x", False), (".x", False), ("a/b", False), ("a:b", False), ("", False),
])
def test_name_pattern(name, ok):
    assert bool(re.match(NAME_PATTERN, name)) is ok


@pytest.mark.parametrize("version,ok", [
    ("1", True), ("1.35.0", True), ("2024-01-01", True), ("RC1_x", True), ("v" * 64, True),
    ("v" * 65, False), ("-1", False), ("1/2", False), ("1:2", False), ("", False),
])
def test_version_pattern(version, ok):
    assert bool(re.match(VERSION_PATTERN, version)) is ok


@pytest.mark.parametrize("ref,ok", [
    ("busybox:1.35", True), ("debian:12", True), ("busybox", False), ("busybox:", False),
    (":1", False), ("a:b:c", False), ("Busybox:1", False),
])
def test_ref_pattern(ref, ok):
    assert bool(re.match(REF_PATTERN, ref)) is ok


def test_environment_in_validation():
    env = EnvironmentIn(name="py", base="debian:12", toolkit="py:3.12")
    assert env.workspace is None
    with pytest.raises(ValidationError) as exc:
        EnvironmentIn(name="py", base="debian")
    assert exc.value.errors()[0]["loc"] == ("base",)
    with pytest.raises(ValidationError):
        EnvironmentIn(name="py", base="debian:12", tooolkit="x:1")  # typo must not be ignored
    with pytest.raises(ValidationError):
        EnvironmentIn(name="Py", base="debian:12")


def test_digest_validation(tmp_path):
    good = "sha256:" + "a" * 64
    assert DIGEST_RE.match(good)
    store = BlobStore(tmp_path)
    assert store.path_for(good) == tmp_path / "blobs" / "sha256" / ("a" * 64)
    for bad in ("sha256:" + "A" * 64, "sha256:" + "a" * 63, "md5:" + "a" * 64, "sha256:../../etc/passwd", "a" * 64):
        assert not DIGEST_RE.match(bad)
        with pytest.raises(ValueError):
            store.path_for(bad)


def test_settings_prefixes(monkeypatch, tmp_path):
    monkeypatch.setenv("CORRAL_IMAGE_PORT", "9100")
    monkeypatch.setenv("CORRAL_PORT", "1")  # another service's port must not leak in
    monkeypatch.setenv("CORRAL_LOG_LEVEL", "DEBUG")  # common fields keep CORRAL_
    monkeypatch.setenv("CORRAL_IMAGE_DATA_DIR", str(tmp_path))
    s = ImageServiceSettings()
    assert s.port == 9100
    assert s.log_level == "DEBUG"
    assert s.effective_database_url == f"sqlite:///{tmp_path}/images.db"
    assert s.max_upload_bytes == 2048 * 1024 * 1024
    monkeypatch.setenv("CORRAL_IMAGE_DATABASE_URL", "postgresql+psycopg://u:p@h/db")
    assert ImageServiceSettings().effective_database_url == "postgresql+psycopg://u:p@h/db"
