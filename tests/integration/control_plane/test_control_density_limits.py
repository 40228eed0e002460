"""A full node is an answer, never a half-started sandbox (issue 16.2, density limits).

Real Redis, RabbitMQ, PostgreSQL; the api, scheduler and image-service as processes. The node
is the node-agent's real control path (NodeEvents, SandboxManager, heartbeats) over the
FakeBackend, which records every start it is asked for: what is under test is what the
platform answers when a node's sandbox count, memory or pids are used up.

- a create beyond the node's room is queued (the designed behaviour, docs/architecture.md
  "Scheduler"): ``pending`` with a reason naming what the node lacks, nothing started on the
  node for it; it runs once room frees and its reason is cleared;
- memory beyond what any node has is a 422 naming ``memory_mb`` that creates nothing.
"""

import uuid

import httpx
import pytest

from corral_common.store.state import StateStore
from corral_node_agent.errors import StartFailed
from tests.control_plane import FakeNode, Service, create_database, drop_database, free_port, register_environment
from tests.polling import until

pytestmark = pytest.mark.asyncio
TOKEN = "density-internal-token"  # noqa: S105 - a test's own secret
KEY = "density-key-1234"
SPEC = {"environment": "dense", "memory_mb": 64, "cpu": 0.25, "disk_mb": 64}


@pytest.fixture
def database_url(postgres_url):
    url = create_database(postgres_url, "density")
    yield url
    drop_database(postgres_url, url)


async def test_a_full_node_queues_with_a_reason_and_starts_nothing_until_room_frees(
        redis_url, amqp_url, database_url, tmp_path):
    images_port, api_port, sched_port = free_port(), free_port(), free_port()
    common = {"CORRAL_REDIS_URL": redis_url, "CORRAL_AMQP_URL": amqp_url, "CORRAL_INTERNAL_TOKEN": TOKEN,
              "CORRAL_IMAGE_SERVICE_URL": f"http://127.0.0.1:{images_port}", "CORRAL_LOG_LEVEL": "WARNING"}
    services = [
        Service("image-service", "corral_image_service", {
            **common, "CORRAL_IMAGE_HOST": "127.0.0.1", "CORRAL_IMAGE_PORT": str(images_port),
            "CORRAL_IMAGE_DATA_DIR": str(tmp_path / "images"), "CORRAL_IMAGE_DATABASE_URL": database_url,
        }, images_port, tmp_path),
        Service("api", "corral_api", {
            **common, "CORRAL_API_HOST": "127.0.0.1", "CORRAL_API_PORT": str(api_port),
            "CORRAL_API_DATA_DIR": str(tmp_path / "api"), "CORRAL_API_DATABASE_URL": database_url,
            "CORRAL_API_KEYS": f"dense:{KEY}"}, api_port, tmp_path),
        Service("scheduler", "corral_scheduler", {
            **common, "CORRAL_SCHEDULER_HOST": "127.0.0.1", "CORRAL_SCHEDULER_PORT": str(sched_port),
            "CORRAL_SCHEDULER_PLACEMENT_RETRY_S": "0.05"}, sched_port, tmp_path),
    ]
    store = StateStore.from_url(redis_url)
    node = FakeNode(f"dense-{uuid.uuid4().hex[:6]}", {"redis_url": redis_url, "amqp_url": amqp_url,
                                                      "internal_token": TOKEN,
                                                      "image_service_url": services[0].url},
                    tmp_path, max_sandboxes=2)
    client = httpx.AsyncClient(base_url=services[1].url, headers={"authorization": f"Bearer {KEY}"}, timeout=30)
    try:
        for service in services:
            await until(service.healthz, timeout_s=40, what=f"{service.name} healthy", interval_s=0.1)
        await register_environment(services[0].url, TOKEN, "dense", tmp_path)
        await node.start()

        first = []
        for _ in range(2):
            r = await client.post("/v1/sandboxes", json=SPEC, params={"wait_for": "running", "timeout": 30})
            assert r.status_code == 202 and r.json()["state"] == "running", r.text
            first.append(r.json()["id"])

        # The third finds the node's two slots taken: queued, saying why, nothing on the node.
        r = await client.post("/v1/sandboxes", json=SPEC)
        assert r.status_code == 202, r.text
        third = r.json()["id"]

        async def waiting_with_reason() -> dict | None:
            got = (await client.get(f"/v1/sandboxes/{third}")).json()
            return got if got["state"] == "pending" and got.get("reason") else None

        got = await until(waiting_with_reason, timeout_s=20, what="the third sandbox pending with a reason")
        assert got["reason"].startswith("waiting for room: ") and f"{node.node_id} full" in got["reason"], got
        assert "sandbox slots (2/2)" in got["reason"], got
        assert got.get("node_id") is None
        assert node.starts() == first  # never asked to start it
        assert third not in node.manager.ids()
        assert await store.reservation_node(third) is None  # nor counted on the node
        assert (await store.get_node(node.node_id)).used_sandboxes == 2

        # Room frees: it runs, and the waiting reason goes with the wait.
        r = await client.delete(f"/v1/sandboxes/{first[0]}", params={"wait": "true", "timeout": 30})
        assert r.status_code == 202 and r.json()["state"] == "terminated", r.text
        r = await client.get(f"/v1/sandboxes/{third}", params={"wait_for": "running", "timeout": 30})
        assert r.json()["state"] == "running" and r.json().get("reason") is None, r.text
        assert node.starts() == [*first, third]

        # The listing pages (so that it stays fast at 10,000): id order, each once, the filter applied.
        everything = [x["id"] for x in (await client.get("/v1/sandboxes")).json()["items"]]
        assert sorted(everything) == everything and len(everything) == 3
        r = await client.get("/v1/sandboxes", params={"limit": 2})
        assert [x["id"] for x in r.json()["items"]] == everything[:2] and r.json()["next_after"] == everything[1]
        r = await client.get("/v1/sandboxes", params={"limit": 2, "after": everything[1]})
        assert [x["id"] for x in r.json()["items"]] == everything[2:] and r.json()["next_after"] is None
        r = await client.get("/v1/sandboxes", params={"limit": 5, "state": "running"})
        assert {x["id"] for x in r.json()["items"]} == {first[1], third}
        r = await client.get("/v1/sandboxes", params={"after": everything[0]})
        assert r.status_code == 400 and r.json()["error"]["details"][0]["loc"] == ["query", "after"], r.text
        r = await client.get("/v1/sandboxes", params={"limit": 0})
        assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["query", "limit"], r.text

        # Memory beyond what any node has: a 422 naming the field and the most there is, nothing recorded.
        before = len((await client.get("/v1/sandboxes")).json()["items"])
        r = await client.post("/v1/sandboxes", json={**SPEC, "memory_mb": 200_000})
        assert r.status_code == 422, r.text
        body = r.json()["error"]
        assert body["code"] == "exceeds_node_capacity" and body["details"][0]["loc"] == ["body", "memory_mb"], body
        assert len((await client.get("/v1/sandboxes")).json()["items"]) == before
        assert len(node.starts()) == 3

        # A start the node refuses fails the sandbox with the node's words, not just a code, and
        # the record outlives Redis's hour in the history with them.
        r = await client.delete(f"/v1/sandboxes/{third}", params={"wait": "true", "timeout": 30})
        assert r.json()["state"] == "terminated", r.text
        node.backend.fail_start = StartFailed("crun: open_tree: Too many open files")
        r = await client.post("/v1/sandboxes", json=SPEC, params={"wait_for": "running", "timeout": 30})
        assert r.status_code == 202, r.text
        got = r.json()
        assert (got["state"], got["reason"], got["error"]) == (
            "failed", "start_failed", "crun: open_tree: Too many open files"), got
        r = await client.post(f"/v1/sandboxes/{got['id']}/exec", json={"cmd": ["true"]})
        assert r.status_code == 409 and "(start_failed: crun: open_tree: Too many open files)" in r.text, r.text

        async def from_history() -> dict | None:
            await store.redis.delete(f"sb:{got['id']}")  # as its hour in Redis ends
            r = await client.get(f"/v1/sandboxes/{got['id']}")
            return r.json() if r.status_code == 200 else None

        old = await until(from_history, timeout_s=20, what="the failed sandbox in the history")
        assert (old["state"], old["reason"], old["error"]) == ("failed", "start_failed", got["error"]), old
    finally:
        await client.aclose()
        if hasattr(node, "events"):
            await node.close()
        await store.close()
        for service in services:
            service.stop()
