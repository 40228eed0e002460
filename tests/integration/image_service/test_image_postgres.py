"""Migrations and a layer/environment round trip on PostgreSQL.

The server comes from the `postgres_url` fixture (tests/conftest.py). Each run works in its
own throwaway schema, so a shared database is left as it was.
"""

import io
import tarfile
import uuid
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, inspect

from corral_image_service.app import create_app
from corral_image_service.db.migrate import VERSION_TABLE, downgrade, run_migrations
from corral_image_service.settings import ImageServiceSettings


@pytest.fixture
def schema(postgres_url):
    name = f"image_test_{uuid.uuid4().hex[:10]}"
    engine = create_engine(postgres_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
    try:
        yield postgres_url, name
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{name}" CASCADE')
        engine.dispose()


def _url_with_schema(schema: tuple[str, str]) -> str:
    url, name = schema
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={name}')}"


def test_migrations_up_and_down(schema):
    engine = create_engine(_url_with_schema(schema))
    try:
        run_migrations(engine)
        tables = set(inspect(engine).get_table_names(schema=schema[1]))
        assert {"layers", "environments", "disk_images", VERSION_TABLE} <= tables
        run_migrations(engine)  # idempotent
        downgrade(engine, "base")
        assert set(inspect(engine).get_table_names(schema=schema[1])) <= {VERSION_TABLE}
    finally:
        engine.dispose()


def test_api_round_trip_on_postgres(schema, tmp_path):
    settings = ImageServiceSettings(data_dir=str(tmp_path / "data"), database_url=_url_with_schema(schema),
                                    log_json=False, log_level="WARNING")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        ti = tarfile.TarInfo("hello")
        ti.size = 3
        tf.addfile(ti, io.BytesIO(b"hi\n"))
    with TestClient(create_app(settings)) as c:
        params = {"kind": "base", "name": "pg", "version": "1"}
        r = c.post("/v1/layers", params=params, content=buf.getvalue(), headers={"Content-Type": "application/x-tar"})
        assert r.status_code == 201, r.text
        assert c.post("/v1/layers", params=params, content=buf.getvalue(),
                      headers={"Content-Type": "application/x-tar"}).status_code == 200
        assert c.post("/v1/environments", json={"name": "pg", "base": "pg:1"}).status_code == 201
        assert c.post("/v1/environments", json={"name": "pg", "base": "pg:1"}).status_code == 200
        assert c.get("/v1/environments/pg").json()["layers"][0]["digest"] == r.json()["digest"]
