"""Scale-out on the existing engines: two api replicas and two schedulers at once, one
scheduler SIGKILLed while it holds requests, and every sandbox is placed exactly once.

Real Redis, RabbitMQ and PostgreSQL. image-service, both api replicas and both schedulers run
as real processes (`python -m ...`, configured only by CORRAL_* env, as in a deployment), so
one scheduler can be SIGKILLed. The two nodes are the node-agent's real control path
(NodeEvents: place/stop consumers, heartbeats with an advertised URL, SandboxManager and a
LayerCache fetching from the image-service) in this process, over the FakeBackend instead of
crun: what is under test is placement, not containers.
"""

import asyncio
import collections
import signal
import uuid

import httpx
import pytest

from corral_common.contracts.sandboxes import SandboxState
from corral_common.store.state import StateStore
from tests.control_plane import FakeNode, Service, create_database, drop_database, free_port, register_environment
from tests.polling import until
from tests.specs import guaranteed_body

TOKEN = "scale-out-internal-token"  # noqa: S105 - a test's own secret
KEY = "scale-out-key-1234"
SPEC = guaranteed_body(environment="burst", memory_mb=64, cpu=0.25, disk_mb=64)  # reserves what it may use
SINGLES_BEFORE_KILL, SINGLES_AFTER_KILL, JOB_COUNT = 60, 40, 20
ROOM_BEFORE, ROOM_AFTER = 5, 70  # sandboxes per node: full before the kill, room for all after


@pytest.fixture
def database_url(postgres_url):
    url = create_database(postgres_url, "scale")
    yield url
    drop_database(postgres_url, url)


async def _states(store: StateStore, ids: list[str]) -> collections.Counter:
    async with store.redis.pipeline(transaction=False) as pipe:
        for sid in ids:
            pipe.hget(f"sb:{sid}", "state")
        return collections.Counter(await pipe.execute())


async def test_two_apis_and_two_schedulers_one_killed_mid_burst_place_every_sandbox_once(
        redis_url, amqp_url, database_url, tmp_path):
    images_port = free_port()
    common = {"CORRAL_REDIS_URL": redis_url, "CORRAL_AMQP_URL": amqp_url, "CORRAL_INTERNAL_TOKEN": TOKEN,
              "CORRAL_IMAGE_SERVICE_URL": f"http://127.0.0.1:{images_port}", "CORRAL_LOG_LEVEL": "WARNING"}
    images = Service("image-service", "corral_image_service", {
        **common, "CORRAL_IMAGE_HOST": "127.0.0.1", "CORRAL_IMAGE_PORT": str(images_port),
        "CORRAL_IMAGE_DATA_DIR": str(tmp_path / "images"), "CORRAL_IMAGE_DATABASE_URL": database_url,
    }, images_port, tmp_path)
    apis, schedulers = [], []
    for i in range(2):
        port = free_port()
        apis.append(Service(f"api-{i}", "corral_api", {
            **common, "CORRAL_API_HOST": "127.0.0.1", "CORRAL_API_PORT": str(port),
            "CORRAL_API_DATA_DIR": str(tmp_path / f"api-{i}"), "CORRAL_API_DATABASE_URL": database_url,
            "CORRAL_API_KEYS": f"scale:{KEY}"}, port, tmp_path))
        port = free_port()
        schedulers.append(Service(f"scheduler-{i}", "corral_scheduler", {
            **common, "CORRAL_SCHEDULER_HOST": "127.0.0.1", "CORRAL_SCHEDULER_PORT": str(port),
            "CORRAL_SCHEDULER_PLACEMENT_RETRY_S": "0.05"}, port, tmp_path))
    services = [images, *apis, *schedulers]
    store = StateStore.from_url(redis_url)
    node_env = {"redis_url": redis_url, "amqp_url": amqp_url, "internal_token": TOKEN,
                "image_service_url": images.url}
    nodes = [FakeNode(f"scale-{n}-{uuid.uuid4().hex[:4]}", node_env, tmp_path, max_sandboxes=ROOM_BEFORE)
             for n in "ab"]
    clients = [httpx.AsyncClient(base_url=api.url, headers={"authorization": f"Bearer {KEY}"}, timeout=30)
               for api in apis]
    try:
        # Five processes start together; the three on one PostgreSQL database take turns migrating it.
        for service in services:
            await until(service.healthz, timeout_s=40, what=f"{service.name} healthy", interval_s=0.1)
        await register_environment(images.url, TOKEN, "burst", tmp_path)
        for node in nodes:
            await node.start()

        sem = asyncio.Semaphore(16)

        async def create(i: int) -> str:
            async with sem:
                r = await clients[i % 2].post("/v1/sandboxes", json=SPEC)
            assert r.status_code == 202, r.text
            return r.json()["id"]

        # Burst, part one: 60 single creates across both replicas and a 20-sandbox job, onto
        # nodes with room for 10. Both schedulers hold requests (unacked) waiting for room.
        job = await clients[0].post("/v1/jobs", json={"spec": SPEC, "count": JOB_COUNT})
        assert job.status_code == 202, job.text
        job_id = job.json()["id"]
        singles = await asyncio.gather(*(create(i) for i in range(SINGLES_BEFORE_KILL)))

        async def full_and_holding() -> bool:
            used = sum([(await store.get_node(n.node_id)).used_sandboxes for n in nodes])
            health = await schedulers[0].healthz()
            return used == 2 * ROOM_BEFORE and health is not None and health["waiting"] > 0

        await until(full_and_holding, timeout_s=20, what="nodes full and scheduler-0 holding requests")
        held = (await schedulers[0].healthz())["waiting"]
        schedulers[0].proc.send_signal(signal.SIGKILL)
        schedulers[0].proc.wait(timeout=10)

        # Part two, with scheduler-0 dead: 40 more creates while the nodes make room for all.
        more = asyncio.gather(*(create(i) for i in range(SINGLES_AFTER_KILL)))
        for node in nodes:
            await node.make_room(ROOM_AFTER)
        singles += await more
        job_ids = [f"{job_id}-{i:05d}" for i in range(JOB_COUNT)]
        ids = singles + job_ids
        assert len(set(ids)) == len(ids) == SINGLES_BEFORE_KILL + SINGLES_AFTER_KILL + JOB_COUNT

        async def all_running() -> bool:
            return (await _states(store, ids))[SandboxState.running.value] == len(ids)

        await until(all_running, timeout_s=45, what=f"all {len(ids)} sandboxes running "
                                                     f"(scheduler-0 was killed holding {held})")

        # Placed exactly once: one reservation per sandbox, on the node its record names, and
        # the nodes' books add up to exactly these sandboxes.
        node_ids = {n.node_id for n in nodes}
        for sid in ids:
            record = await store.get_sandbox(sid)
            assert record.node_id in node_ids, (sid, record)
            assert await store.reservation_node(sid) == record.node_id, sid
        assert len([k async for k in store.redis.scan_iter("resv:*")]) == len(ids)
        infos = [await store.get_node(n.node_id) for n in nodes]
        assert sum(i.used_sandboxes for i in infos) == len(ids)
        assert sum(i.used_memory_mb for i in infos) == SPEC["memory_mb"] * len(ids)
        holders = [await store.node_sandboxes(n.node_id) for n in nodes]
        assert not holders[0] & holders[1], "a sandbox reserved on two nodes"
        assert holders[0] | holders[1] == set(ids)
        # ...and started once, on one node, whatever the redelivered place commands said.
        starts = collections.Counter(sid for node in nodes for sid in node.starts())
        assert starts == collections.Counter(ids)
        # Each node advertised the URL it was configured with, and the api hands it out.
        assert {i.url for i in infos} == {n.advertise_url for n in nodes}

        # Both replicas see every sandbox and the job, whichever replica created them.
        for client in clients:
            items = (await client.get("/v1/sandboxes")).json()["items"]
            assert {s["id"] for s in items} == set(ids)
            assert {s["state"] for s in items} == {"running"}
            got = (await client.get(f"/v1/jobs/{job_id}")).json()
            assert (got["admitted"], got["pending"]) == (JOB_COUNT, 0), got
        assert (await schedulers[1].healthz())["waiting"] == 0
    finally:
        for client in clients:
            await client.aclose()
        for node in nodes:
            if hasattr(node, "events"):
                await node.close()
        await store.close()
        for service in services:
            service.stop()
