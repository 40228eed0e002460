"""Fixtures of the image-service tests: the real app (TestClient) on a tmp data dir and SQLite.

A module that needs other settings for its ``client`` overrides ``settings_overrides``.
"""

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral_image_service.app import create_app
from tests.integration.image_service.helpers import image_settings


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def settings_overrides() -> dict:
    return {}


@pytest.fixture
def client(data_dir: Path, settings_overrides: dict):
    with TestClient(create_app(image_settings(data_dir, **settings_overrides))) as c:
        yield c
