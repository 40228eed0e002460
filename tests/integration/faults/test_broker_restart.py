"""RabbitMQ restarts under a running control plane: nothing lost, nothing started twice.

A RabbitMQ of this test's own (scripts/servers.sh start-rabbitmq/stop-rabbitmq: the real
broker process stopped and started on the same data, never the shared one); the shared
Redis (a private database). image-service, two api processes (one that waits for the broker
up to 90 s, one only 1 s) and a scheduler run as processes; the node is the node-agent's real
control path over the FakeBackend in this process (tests/control_plane.py).

While the broker is down: requests the scheduler holds for room (unacked) and more waiting
in the quorum queue, a job being admitted, and creates sent during the outage itself (their
publish waits for the broker). After it is back every one of them runs, each started exactly
once; stop commands reach the node; the api's history consumer records them; the impatient
api answers 503 broker_unavailable (JSON, Retry-After) during the outage and 202 after.
"""

import asyncio
import collections

import httpx
from sqlalchemy import create_engine, text

from corral_common.store.state import StateStore
from tests.control_plane import FakeNode, Service, free_port, register_environment
from tests.polling import until

TOKEN = "broker-restart-internal-token"  # noqa: S105 - a test's own secret
KEY = "broker-restart-key-1234"
SPEC = {"environment": "mq", "memory_mb": 64, "cpu": 0.25, "disk_mb": 64}
BEFORE, QUEUED, DURING, JOB_COUNT = 15, 15, 15, 15


async def _states(store: StateStore, ids: list[str]) -> collections.Counter:
    async with store.redis.pipeline(transaction=False) as pipe:
        for sid in ids:
            pipe.hget(f"sb:{sid}", "state")
        return collections.Counter(await pipe.execute())


async def test_broker_restart_loses_no_request_and_starts_none_twice(redis_url, private_broker, tmp_path):
    broker = private_broker
    images_port = free_port()
    common = {"CORRAL_REDIS_URL": redis_url, "CORRAL_AMQP_URL": broker.url, "CORRAL_INTERNAL_TOKEN": TOKEN,
              "CORRAL_IMAGE_SERVICE_URL": f"http://127.0.0.1:{images_port}", "CORRAL_LOG_LEVEL": "WARNING",
              "CORRAL_AMQP_PUBLISH_TIMEOUT_S": "90"}
    images = Service("image-service", "corral_image_service", {
        **common, "CORRAL_IMAGE_HOST": "127.0.0.1", "CORRAL_IMAGE_PORT": str(images_port),
        "CORRAL_IMAGE_DATA_DIR": str(tmp_path / "images")}, images_port, tmp_path)
    apis = []
    for name, bound in (("api", "90"), ("api-brief", "1")):
        port = free_port()
        apis.append(Service(name, "corral_api", {
            **common, "CORRAL_AMQP_PUBLISH_TIMEOUT_S": bound, "CORRAL_API_HOST": "127.0.0.1",
            "CORRAL_API_PORT": str(port), "CORRAL_API_DATA_DIR": str(tmp_path / name),
            "CORRAL_API_KEYS": f"mq:{KEY}"}, port, tmp_path))
    port = free_port()
    scheduler = Service("scheduler", "corral_scheduler", {
        **common, "CORRAL_SCHEDULER_HOST": "127.0.0.1", "CORRAL_SCHEDULER_PORT": str(port),
        "CORRAL_SCHEDULER_PLACEMENT_RETRY_S": "0.05"}, port, tmp_path)
    services = [images, *apis, scheduler]
    store = StateStore.from_url(redis_url)
    node = FakeNode("mq-node", {"redis_url": redis_url, "amqp_url": broker.url, "internal_token": TOKEN,
                                "image_service_url": images.url, "amqp_publish_timeout_s": 90},
                    tmp_path, max_sandboxes=BEFORE)
    api, brief = (httpx.AsyncClient(base_url=s.url, headers={"authorization": f"Bearer {KEY}"}, timeout=120)
                  for s in apis)
    try:
        for service in services:
            await until(service.healthz, timeout_s=60, what=f"{service.name} healthy", interval_s=0.1)
        await register_environment(images.url, TOKEN, "mq", tmp_path)
        await node.start()

        async def create(client: httpx.AsyncClient) -> str:
            r = await client.post("/v1/sandboxes", json=SPEC)
            assert r.status_code == 202, r.text
            return r.json()["id"]

        async def all_in(ids: list[str], state: str) -> bool:
            return (await _states(store, ids))[state] == len(ids)

        before = await asyncio.gather(*(create(api) for _ in range(BEFORE)))
        await until(lambda: all_in(before, "running"), timeout_s=60, what="the first sandboxes running")
        # The node is full: these wait, held by the scheduler (unacked) or in its quorum queue.
        queued = await asyncio.gather(*(create(api) for _ in range(QUEUED)))
        job = await api.post("/v1/jobs", json={"spec": SPEC, "count": JOB_COUNT})
        assert job.status_code == 202, job.text
        job_id = job.json()["id"]
        await until(lambda: _holding(scheduler), timeout_s=30, what="the scheduler holding requests for room")

        # (In a thread: the node's heartbeats run on this loop, and must go on meanwhile.)
        await asyncio.to_thread(broker.stop)
        during = [asyncio.create_task(create(api)) for _ in range(DURING)]
        r = await brief.post("/v1/sandboxes", json=SPEC)  # waits 1 s for the broker, then gives up
        assert r.status_code == 503, r.text
        assert r.headers["content-type"] == "application/json" and "retry-after" in r.headers
        assert r.json()["error"]["code"] == "broker_unavailable", r.json()
        assert not any(task.done() for task in during), "a create answered while the broker was down"
        await asyncio.to_thread(broker.start)
        during = list(await asyncio.gather(*during))

        await node.make_room(BEFORE + QUEUED + DURING + JOB_COUNT)
        ids = before + queued + during + [f"{job_id}-{i:05d}" for i in range(JOB_COUNT)]
        assert len(set(ids)) == len(ids)
        try:
            await until(lambda: all_in(ids, "running"), timeout_s=120,
                        what=f"all {len(ids)} sandboxes running after the restart")
        except AssertionError as exc:
            stuck = {sid: (await store.get_sandbox(sid)) for sid in ids}
            stuck = {sid: (r.state.value, r.node_id) if r else None for sid, r in stuck.items()
                     if not r or r.state.value != "running"}
            raise AssertionError(f"{exc}: {stuck}; scheduler log:\n{scheduler.log.read_text()[-4000:]}") from None
        # Started exactly once, whatever the broker delivered again.
        assert collections.Counter(node.starts()) == collections.Counter(ids)
        got = (await api.get(f"/v1/jobs/{job_id}")).json()
        assert (got["admitted"], got["pending"]) == (JOB_COUNT, 0), got

        # Node commands after the restart: stops of old and new sandboxes reach the node, and
        # the api's history consumer (a quorum queue consumed again) records them.
        stopping = before[:5] + during[:5]
        for sid in stopping:
            r = await api.delete(f"/v1/sandboxes/{sid}")
            assert r.status_code == 202, r.text
        await until(lambda: all_in(stopping, "terminated"), timeout_s=60, what="the stopped ones terminated")
        assert collections.Counter(node.calls("stop")) == collections.Counter(stopping)
        # (Both apis consume the one records queue, each writing to its own database.)
        histories = [create_engine(f"sqlite:///{tmp_path / s.name / 'api.db'}") for s in apis]

        def recorded() -> set[str]:
            ids = set()
            for engine in histories:
                with engine.connect() as conn:
                    ids |= {row[0] for row in conn.execute(
                        text("SELECT id FROM sandbox_history WHERE state = 'terminated'"))}
            return ids

        await until(lambda: recorded() >= set(stopping), timeout_s=30, what="history rows of the stopped sandboxes")
        for engine in histories:
            engine.dispose()
        # The impatient api's publisher came back too.
        again = await create(brief)
        await until(lambda: all_in([again], "running"), timeout_s=30, what="a create through api-brief running")
    finally:
        await api.aclose()
        await brief.aclose()
        if hasattr(node, "events"):
            await node.close()
        await store.close()
        for service in services:
            service.stop()


async def _holding(scheduler: Service) -> bool:
    health = await scheduler.healthz()
    return bool(health and health["waiting"] > 0)
