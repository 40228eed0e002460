"""PostgreSQL restarts under the api and the image-service: a PostgreSQL of the test's own
(scripts/servers.sh start-postgres/stop-postgres, never the shared one), both services as
processes on it, the shared Redis (a private database) and RabbitMQ (a private vhost).

While it is down every request that needs SQL answers 503 ``database_unavailable`` (JSON,
Retry-After) and one that does not (Redis only) still works; a rollout whose row cannot be
written leaves no sandbox behind. Once it is back both services answer again on their
existing pools (pool_pre_ping replaces the dead connections), neither restarted.
"""

import asyncio

import httpx
import pytest
from sqlalchemy import create_engine, text

from corral_common.web.internal import INTERNAL_TOKEN_HEADER
from tests.control_plane import PrivatePostgres, Service, create_database, free_port, register_environment
from tests.polling import until

TOKEN = "database-restart-internal-token"  # noqa: S105 - a test's own secret
KEY, FRESH_KEY = "database-restart-key-1", "database-restart-key-2"  # the second is first used mid-outage
SPEC = {"environment": "pg", "memory_mb": 64, "cpu": 0.25, "disk_mb": 64}


@pytest.fixture
def postgres():
    server = PrivatePostgres()
    server.start()
    yield server
    server.remove()


def assert_db_503(r: httpx.Response) -> None:
    assert r.status_code == 503, (r.request.url, r.status_code, r.text)
    assert r.headers["content-type"] == "application/json" and "retry-after" in r.headers, r.headers
    assert r.json()["error"]["code"] == "database_unavailable", r.json()


async def test_requests_during_a_database_restart_are_503_and_the_services_serve_after(
        redis_url, amqp_url, postgres, tmp_path):
    api_db, images_db = create_database(postgres.url, "api"), create_database(postgres.url, "images")
    images_port, api_port = free_port(), free_port()
    common = {"CORRAL_REDIS_URL": redis_url, "CORRAL_AMQP_URL": amqp_url, "CORRAL_INTERNAL_TOKEN": TOKEN,
              "CORRAL_IMAGE_SERVICE_URL": f"http://127.0.0.1:{images_port}", "CORRAL_LOG_LEVEL": "WARNING"}
    images = Service("image-service", "corral_image_service", {
        **common, "CORRAL_IMAGE_HOST": "127.0.0.1", "CORRAL_IMAGE_PORT": str(images_port),
        "CORRAL_IMAGE_DATA_DIR": str(tmp_path / "images"), "CORRAL_IMAGE_DATABASE_URL": images_db}, images_port, tmp_path)
    api = Service("api", "corral_api", {
        **common, "CORRAL_API_HOST": "127.0.0.1", "CORRAL_API_PORT": str(api_port),
        "CORRAL_API_DATA_DIR": str(tmp_path / "api"), "CORRAL_API_DATABASE_URL": api_db,
        "CORRAL_API_KEYS": f"pg:{KEY},pg:{FRESH_KEY}"}, api_port, tmp_path)
    client = httpx.AsyncClient(base_url=api.url, headers={"authorization": f"Bearer {KEY}"}, timeout=60)
    fresh = httpx.AsyncClient(base_url=api.url, headers={"authorization": f"Bearer {FRESH_KEY}"}, timeout=60)
    internal = httpx.AsyncClient(base_url=images.url, headers={INTERNAL_TOKEN_HEADER: TOKEN}, timeout=60)
    try:
        for service in (images, api):
            await until(service.healthz, timeout_s=60, what=f"{service.name} healthy", interval_s=0.1)
        await register_environment(images.url, TOKEN, "pg", tmp_path)
        # Before: SQL answers, and the pools hold connections the restart will kill.
        kept = await client.post("/v1/rollouts", params={"wait": "false"}, json={"job_id": "j", "sandbox": SPEC})
        assert kept.status_code == 201, kept.text
        kept = kept.json()
        assert (await client.get("/v1/rollouts")).status_code == 200
        assert (await internal.get("/v1/environments")).status_code == 200
        pids = (api.proc.pid, images.proc.pid)

        await asyncio.to_thread(postgres.stop)
        assert_db_503(await client.get("/v1/rollouts"))
        assert_db_503(await client.get(f"/v1/rollouts/{kept['id']}"))
        assert_db_503(await fresh.get("/v1/sandboxes"))  # its key is not cached yet: a lookup in SQL
        assert_db_503(await internal.get("/v1/environments"))
        # Not half-applied: the rollout's sandbox (Redis, the bus) is made before its row, and
        # goes again when the row cannot be written.
        assert_db_503(await client.post("/v1/rollouts", params={"wait": "false"},
                                        json={"job_id": "j", "sandbox": SPEC}))
        listed = (await client.get("/v1/sandboxes")).json()["items"]  # Redis alone: still served
        others = [s for s in listed if s["id"] != kept["sandbox_id"]]
        assert len(others) == 1 and others[0]["state"] == "terminated", listed
        assert (await client.get("/healthz")).status_code == 200
        # A sandbox that ends meanwhile: its history row waits for the database (the recorder
        # holds the event and tries again), it is not dropped after the delivery limit.
        r = await client.delete(f"/v1/sandboxes/{kept['sandbox_id']}")
        assert r.status_code == 202 and r.json()["state"] == "terminated", r.text

        await asyncio.to_thread(postgres.start)
        r = await client.get("/v1/rollouts")
        assert r.status_code == 200, r.text
        assert [item["id"] for item in r.json()["items"]] == [kept["id"]]  # the refused one left no row
        assert (await fresh.get("/v1/sandboxes")).status_code == 200
        r = await internal.get("/v1/environments")
        assert r.status_code == 200 and [e["name"] for e in r.json()] == ["pg"], r.text
        again = await client.post("/v1/rollouts", params={"wait": "false"}, json={"job_id": "j", "sandbox": SPEC})
        assert again.status_code == 201, again.text
        history = create_engine(api_db)

        def recorded() -> bool:
            with history.connect() as conn:
                return conn.execute(text("SELECT state FROM sandbox_history WHERE id = :id"),
                                    {"id": kept["sandbox_id"]}).scalar() == "terminated"

        await until(recorded, timeout_s=30, what="the history row of the sandbox that ended during the outage")
        history.dispose()
        assert (api.proc.pid, images.proc.pid) == pids and api.proc.poll() is None and images.proc.poll() is None
    finally:
        for c in (client, fresh, internal):
            await c.aclose()
        api.stop()
        images.stop()
