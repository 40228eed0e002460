"""Redis restarts under running sandboxes: with its data (the AOF), and without it (wiped).

The platform runs in this process (the real api, scheduler, image-service and node-agent
apps, real crun containers) against a Redis of this test's own, started by
scripts/servers.sh as CI and `make up` start theirs, on this worker's private port. The
node-agent is served over HTTP because the api reaches it there for exec.
"""

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from corral_common.store.redis_client import connect
from tests import ports
from tests.polling import until
from tests.sandbox_host import container_skip_reason

SKIP_REASON = container_skip_reason()  # enters the private mount namespace (at import: single-threaded)
pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "runs")

ROOT = Path(__file__).resolve().parents[2]
SERVERS = str(ROOT / "scripts/servers.sh")
REDIS_PORT = ports.private(50)
TOKEN = "durability-internal-token"
KEY, OTHER_KEY = "durable-key-123456", "other-key-1234567"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A Redis of this test's own, persisting to dir/redis (scripts/servers.sh)."""

    def __init__(self, directory: str):
        self.dir = directory
        self.url = ""

    def start(self) -> None:
        self.url = subprocess.run([SERVERS, "start-redis", self.dir, str(REDIS_PORT)], check=True,
                                  capture_output=True, text=True).stdout.split()[-1]

    def stop(self) -> None:
        subprocess.run([SERVERS, "stop-redis", self.dir], check=True)

    def restart(self, *, keep_data: bool) -> None:
        self.stop()
        if not keep_data:
            shutil.rmtree(f"{self.dir}/redis/appendonlydir")
        self.start()


@pytest.fixture
def redis_server():
    directory = tempfile.mkdtemp(prefix="corral-durable-redis-")
    server = RedisServer(directory)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


class NodeAgent:
    """The node-agent app, served over HTTP (the api reaches it there); can be restarted."""

    def __init__(self, settings):
        self.settings = settings
        self.app = self.server = self.task = None

    async def start(self) -> None:
        from corral_node_agent.app import create_app

        self.app = create_app(self.settings)
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.settings.port,
                                                    log_level="warning"))
        self.task = asyncio.create_task(self.server.serve())
        await until(lambda: self.server.started or self.task.done(), what="node-agent started")
        assert not self.task.done(), "node-agent failed to start"

    async def stop(self, *, keep_sandboxes: bool = False) -> None:
        """Stop the agent; its sandboxes go first unless kept (to be re-adopted by the next)."""
        if self.task is None:
            return
        if self.server.started and not keep_sandboxes:
            for sandbox_id in self.app.state.services.manager.ids():
                await self.app.state.services.manager.delete(sandbox_id)
        self.server.should_exit = True
        await self.task
        self.task = None


class Platform:
    def __init__(self, api: httpx.AsyncClient, other: httpx.AsyncClient, node: NodeAgent, redis, amqp_url: str):
        self.api, self.other, self.node, self.redis, self.amqp_url = api, other, node, redis, amqp_url
        self.node_id = node.settings.node_id

    @property
    def manager(self):
        return self.node.app.state.services.manager

    async def create(self, **spec) -> dict:
        r = await self.api.post("/v1/sandboxes", params={"wait_for": "running", "timeout": 60},
                                json={"environment": "busybox", "memory_mb": 64, "cpu": 0.2, "disk_mb": 64, **spec})
        assert r.status_code == 202 and r.json()["state"] == "running", r.text
        return r.json()

    async def found(self, sandbox_id: str) -> bool:
        return (await self.api.get(f"/v1/sandboxes/{sandbox_id}")).status_code == 200

    async def exec(self, sandbox_id: str, cmd: str) -> httpx.Response:
        return await self.api.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": cmd, "timeout_s": 20})

    async def node_view(self) -> dict:
        """What Redis counts on the node: its used counters, sandbox set and reservations."""
        used = await self.redis.hgetall(f"node:{self.node_id}:used")
        members = await self.redis.smembers(f"sb:node:{self.node_id}")
        resv = {sid: await self.redis.get(f"resv:{sid}") for sid in sorted(members)}
        return {"used": {k: int(v) for k, v in used.items()}, "members": members, "resv": resv}

    async def crun_ids(self) -> set[str]:
        """The containers crun runs on the node, named by their sandboxes (a sandbox claimed from
        the warm pool runs under the pooled container's crun id); the pool's own left out."""
        manager = self.manager
        sandbox_of = {manager.runtime_id(sid): sid for sid in manager.ids()}
        return {sandbox_of.get(cid, cid) for cid in await manager.backend.crun.list()
                if manager.pool is None or not manager.pool.owns(cid)}


@pytest.fixture
async def platform(redis_server, amqp_url):
    from corral_api.app import create_app as create_api
    from corral_api.settings import ApiSettings
    from corral_image_service.app import create_app as create_images
    from corral_image_service.builders import build_busybox
    from corral_image_service.settings import ImageServiceSettings
    from corral_node_agent.app import cleanup
    from corral_node_agent.sandboxes.settings import WarmPoolSettings
    from corral_node_agent.settings import NodeAgentSettings
    from corral_scheduler.app import create_app as create_scheduler
    from corral_scheduler.settings import SchedulerSettings

    work = tempfile.mkdtemp(prefix="corral-durable-")
    os.chmod(work, 0o711)  # sandboxes' own uids reach their roots below it
    image_port = free_port()
    images_url = f"http://127.0.0.1:{image_port}"
    images = uvicorn.Server(uvicorn.Config(create_images(ImageServiceSettings(data_dir=f"{work}/images")),
                                           host="127.0.0.1", port=image_port, log_level="warning"))
    images_task = asyncio.create_task(images.serve())
    common = {"redis_url": redis_server.url, "amqp_url": amqp_url, "image_service_url": images_url,
              "internal_token": TOKEN}
    # A short heartbeat timeout: how long the api gives the nodes to register what they run
    # before it queues the jobs of a Redis that lost them again.
    api = create_api(ApiSettings(**common, database_url=f"sqlite:///{work}/api.db", heartbeat_timeout_s=3,
                                 keys=f"durable:{KEY},other:{OTHER_KEY}", rollout_idle_pause_s=0))
    scheduler = create_scheduler(SchedulerSettings(**common))
    # Eager layers: image-service shares this loop, so a lazy (FUSE) read could only be
    # answered by the loop it blocks. Its own capacity registry, not the host's.
    node_settings = NodeAgentSettings(**common, node_id=f"durable-{os.urandom(3).hex()}", state_dir=f"{work}/node",
                                      port=free_port(), layer_mode="eager", heartbeat_interval_s=0.3, max_sandboxes=5,
                                      capacity_registry_dir=f"{work}/capacity", disk_capacity_mb=8192,
                                      warm_pool=WarmPoolSettings(max=32))  # pools on: claimed sandboxes survive too
    node = NodeAgent(node_settings)
    redis = connect(redis_server.url)  # the services' client: it reconnects after a restart
    try:
        await until(lambda: images.started, what="image-service started", interval_s=0.01)
        root = build_busybox(f"{work}/rootfs")
        async with httpx.AsyncClient(base_url=images_url) as client:
            layer = (await client.post("/v1/layers", params={"kind": "base", "name": "busybox", "version": "1",
                                                             "source_dir": str(root)})).json()
            created = await client.post("/v1/environments", json={"name": "busybox", "base": layer["ref"]})
            assert created.status_code == 201, created.text
        await node.start()
        async with api.router.lifespan_context(api), scheduler.router.lifespan_context(scheduler):
            transport = httpx.ASGITransport(app=api)
            async with httpx.AsyncClient(transport=transport, base_url="http://api", timeout=60,
                                         headers={"authorization": f"Bearer {KEY}"}) as client, \
                    httpx.AsyncClient(transport=transport, base_url="http://api", timeout=60,
                                      headers={"authorization": f"Bearer {OTHER_KEY}"}) as other:
                yield Platform(client, other, node, redis, amqp_url)
    finally:
        await node.stop()
        await cleanup(node_settings)  # whatever else it left
        images.should_exit = True
        await images_task
        await redis.aclose()
        from corral_host import mounts

        mounts.umount_tree(work)
        shutil.rmtree(work, ignore_errors=True)


async def quota_used(p: Platform, tenant: str) -> dict[str, int]:
    return {k: int(v) for k, v in (await p.redis.hgetall(f"quota:used:{tenant}")).items()}


def counter(name: str, **labels: str) -> float:
    """A node-agent metric's value now (0 before its first increment)."""
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


def registered(node_id: str, outcome: str) -> float:
    return counter("corral_node_sandboxes_registered_total", node=node_id, outcome=outcome)


async def three_sandboxes(p: Platform) -> list[dict]:
    boxes = [await p.create(labels={"n": str(i), "suite": "durable"}) for i in range(3)]
    for box in boxes:
        assert (await p.exec(box["id"], f"echo {box['id']} > /tmp/mine")).json()["exit_code"] == 0
    paused = await p.api.post(f"/v1/sandboxes/{boxes[2]['id']}/pause")
    assert paused.json()["state"] == "paused", paused.text
    return boxes


async def assert_all_there(p: Platform, boxes: list[dict], before: dict) -> None:
    """Every sandbox as it was: its record (for its tenant only), the list, exec on what it
    wrote before, the node's counters and reservations, nothing orphaned."""
    for box, state in zip(boxes, ["running", "running", "paused"], strict=True):
        got = (await p.api.get(f"/v1/sandboxes/{box['id']}")).json()
        assert (got["state"], got["node_id"], got["labels"], got["created_at"], got["memory_mb"]) == (
            state, box["node_id"], box["labels"], box["created_at"], box["memory_mb"]), got
        assert (await p.other.get(f"/v1/sandboxes/{box['id']}")).status_code == 404  # not another tenant's
    listed = (await p.api.get("/v1/sandboxes", params={"label": "suite=durable"})).json()["items"]
    assert sorted(b["id"] for b in listed) == sorted(b["id"] for b in boxes)
    for box in boxes[:2]:
        out = (await p.exec(box["id"], "cat /tmp/mine")).json()
        assert out["stdout"] == f"{box['id']}\n", out
    resumed = await p.api.post(f"/v1/sandboxes/{boxes[2]['id']}/resume")
    assert resumed.json()["state"] == "running", resumed.text
    assert (await p.exec(boxes[2]["id"], "cat /tmp/mine")).json()["stdout"] == f"{boxes[2]['id']}\n"
    assert await p.node_view() == before
    assert await p.crun_ids() == {b["id"] for b in boxes}  # nothing orphaned, nothing lost


async def test_a_redis_restart_keeps_every_sandbox(platform, redis_server):
    p = platform
    assert await p.redis.config_get("appendonly") == {"appendonly": "yes"}
    assert await p.redis.config_get("appendfsync") == {"appendfsync": "everysec"}
    assert oct(os.stat(f"{redis_server.dir}/redis").st_mode & 0o777) == "0o700"
    boxes = await three_sandboxes(p)
    before = await p.node_view()
    assert before["used"]["sandboxes"] == 3 and before["members"] == {b["id"] for b in boxes}
    counted = registered(p.node_id, "restored")

    redis_server.restart(keep_data=True)

    # The node heartbeats through it; its AOF had everything, so nothing had to be registered again.
    await assert_all_there(p, boxes, before)
    assert registered(p.node_id, "restored") == counted
    # And the platform goes on: a new sandbox, a delete.
    fresh = await p.create()
    deleted = await p.api.delete(f"/v1/sandboxes/{boxes[0]['id']}", params={"wait": True})
    assert deleted.json()["state"] == "terminated"
    assert await p.crun_ids() == {boxes[1]["id"], boxes[2]["id"], fresh["id"]}


async def test_a_redis_restarted_without_its_data_gets_every_sandbox_back_from_its_node(platform, redis_server):
    p = platform
    boxes = await three_sandboxes(p)
    before = await p.node_view()
    counted = registered(p.node_id, "restored")

    redis_server.restart(keep_data=False)
    restarted = time.monotonic()

    async def back() -> bool:
        return all([await p.found(b["id"]) for b in boxes])

    await until(back, timeout_s=30, what="the node registered its sandboxes again")
    print(f"registered again {time.monotonic() - restarted:.2f} s after Redis came back empty")
    # (the paused one was registered paused; assert_all_there resumes it)
    await assert_all_there(p, boxes, before)
    assert registered(p.node_id, "restored") - counted == 3
    # Its tenant's quota ledger counts them again (else the tenant could run 3 more than its quota).
    assert await quota_used(p, "durable") == {"sandboxes": 3, "cpu_milli": 600, "memory_mb": 192, "disk_mb": 192}
    # What was registered again lives its normal life: deleted, it ends and leaves nothing.
    for box in boxes:
        deleted = await p.api.delete(f"/v1/sandboxes/{box['id']}", params={"wait": True})
        assert deleted.json()["state"] == "terminated", deleted.text
    assert await p.crun_ids() == set()

    async def given_back() -> bool:
        return (await quota_used(p, "durable"))["sandboxes"] == 0

    await until(given_back, what="the tenant's quota given back")
    assert await quota_used(p, "durable") == {"sandboxes": 0, "cpu_milli": 0, "memory_mb": 0, "disk_mb": 0}
    view = await p.node_view()
    assert view["members"] == set() and view["used"]["sandboxes"] == 0 and view["used"]["memory_mb"] == 0


async def test_a_sandbox_nobody_owns_is_stopped_and_reported(platform):
    """Flushed Redis and a node that kept no owner record of one sandbox (an agent from before
    owner records, say): that one has no owner anywhere, so it is stopped and counted."""
    p = platform
    kept, orphan = await p.create(), await p.create()
    p.manager.owners.remove(orphan["id"])
    orphans = counter("corral_node_orphans_stopped_total", node=p.node_id)

    await p.redis.flushall()

    await until(lambda: p.found(kept["id"]), what="the owned sandbox registered again")
    await until(lambda: orphan["id"] not in p.manager.ids(), what="the orphan stopped")
    assert counter("corral_node_orphans_stopped_total", node=p.node_id) == orphans + 1
    assert await p.crun_ids() == {kept["id"]}
    assert (await p.api.get(f"/v1/sandboxes/{orphan['id']}")).status_code == 404
    assert (await p.exec(kept["id"], "echo ok")).json()["stdout"] == "ok\n"
    assert (await p.node_view())["members"] == {kept["id"]}


async def test_a_job_and_a_rollout_in_flight_finish_after_redis_lost_everything(platform, redis_server):
    """A job larger than the node (5 at a time, 3 s each) and a rollout, when Redis restarts
    without its data: the sandboxes running are registered again by the node, the job is
    queued again from SQL without the ones that ended, and every sandbox runs exactly once."""
    p = platform
    started: list[str] = []  # every start of a sandbox on the node
    create = p.manager.create

    async def counted_create(sandbox_id, spec, owner=None, **kwargs):
        started.append(sandbox_id)
        return await create(sandbox_id, spec, owner, **kwargs)

    p.manager.create = counted_create
    try:
        rollout = (await p.api.post("/v1/rollouts", json={
            "job_id": "train-1", "sandbox": {"environment": "busybox", "memory_mb": 32, "cpu": 0.1, "disk_mb": 64}},
        )).json()
        step = {"index": 0, "action": "exec", "args": {"cmd": "echo before > /tmp/r"}}
        assert (await p.api.post(f"/v1/rollouts/{rollout['id']}/steps", json=step)).status_code == 200
        count = 12
        job = (await p.api.post("/v1/jobs", json={"spec": {"environment": "busybox", "memory_mb": 32, "cpu": 0.1,
                                                           "disk_mb": 64, "timeout_s": 3}, "count": count})).json()

        async def job_view() -> dict:
            return (await p.api.get(f"/v1/jobs/{job['id']}")).json()

        async def some_ended_some_running() -> bool:
            counts = (await job_view())["counts"]
            return counts.get("terminated", 0) >= 2 and counts.get("running", 0) >= 2

        await until(some_ended_some_running, timeout_s=60, what="a job half way")
        ended_before = (await job_view())["counts"]["terminated"]

        redis_server.restart(keep_data=False)

        async def job_done() -> dict | None:
            r = await p.api.get(f"/v1/jobs/{job['id']}")
            return r.json() if r.status_code == 200 and r.json()["counts"] == {"terminated": count} else None

        wiped = time.monotonic()

        async def job_counted_again() -> bool:
            return await p.redis.hexists("quota:entries:durable", job["id"])

        # Queued again, it counts against its tenant's quotas again (the rest of it, not ended).
        await until(job_counted_again, timeout_s=120, what="the job's quota entry counted again")
        done = await until(job_done, timeout_s=120, what="the job finished after the wipe")
        print(f"job of {count} done {time.monotonic() - wiped:.1f} s after the wipe ({ended_before} had ended before)")
        assert done["pending"] == 0 and done["admitted"] == count, done
        job_ids = sorted(sid for sid in started if sid.startswith(job["id"]))
        assert job_ids == [f"{job['id']}-{i:05d}" for i in range(count)], "each job sandbox ran exactly once"
        assert ended_before < count
        # The rollout's sandbox was registered again: its next step runs where the last one wrote.
        step = {"index": 1, "action": "exec", "args": {"cmd": "cat /tmp/r"}}
        got = await p.api.post(f"/v1/rollouts/{rollout['id']}/steps", json=step)
        assert got.status_code == 200 and got.json()["observation"]["stdout"] == "before\n", got.text
        assert await p.crun_ids() == {rollout["sandbox_id"]}  # nothing orphaned

        async def only_the_rollout_counted() -> bool:
            return (await quota_used(p, "durable")).get("sandboxes") == 1

        # Each job sandbox gave its share back once: the tenant's ledger holds the rollout's only.
        await until(only_the_rollout_counted, timeout_s=30, what="the job's quota share given back")
        assert await p.redis.hkeys("quota:entries:durable") in ([rollout["sandbox_id"]],
                                                                [rollout["sandbox_id"].encode()])
    finally:
        p.manager.create = create


async def test_an_agent_away_while_redis_lost_everything_gets_its_sandboxes_back(platform):
    """The node-agent is down (its sandboxes run on) while Redis is flushed: the agent that
    starts re-adopts them and registers them again before its first heartbeat."""
    p = platform
    boxes = [await p.create(labels={"suite": "away"}) for _ in range(2)]
    before = await p.node_view()
    await p.node.stop(keep_sandboxes=True)

    await p.redis.flushall()
    await p.node.start()

    for box in boxes:  # no polling: registered before the agent took any work
        got = (await p.api.get(f"/v1/sandboxes/{box['id']}")).json()
        assert (got["state"], got["created_at"], got["labels"]) == ("running", box["created_at"], {"suite": "away"})
        assert (await p.exec(box["id"], "echo back")).json()["stdout"] == "back\n"
    assert await p.node_view() == before
    assert await p.crun_ids() == {b["id"] for b in boxes}


async def test_a_stopped_agent_keeps_its_sandboxes_and_leaves_nothing_of_its_warm_pool(platform):
    """The node's warm pool is on (this platform turns it on): a stream of creates of one shape fills it. A
    graceful stop keeps the sandboxes running for the next run (claimed ones too) and stops
    every pooled container: no container, cgroup, directory or loop device of one is left."""
    p = platform
    boxes = [await p.create(labels={"suite": "pool"}) for _ in range(3)]
    await until(lambda: p.manager.pool is not None and p.manager.pool.ready_count() >= 1, 60, "a pooled container")
    state = Path(p.node.settings.state_dir)
    pooled = [a.runtime_id for shape in p.manager.pool.shapes() for a in shape.ready]
    claimed = await p.create(labels={"suite": "pool"})
    runtime = claimed.get("runtime", {}).get("warm_pool")
    assert runtime in pooled, (claimed, pooled)  # served from the pool
    crun = p.manager.backend.crun
    # The sandboxes' crun ids: a claimed one's is the pooled container's it was claimed from.
    kept = {b["id"]: (b.get("runtime") or {}).get("warm_pool", b["id"]) for b in [*boxes, claimed]}
    await p.node.stop(keep_sandboxes=True)

    listed = set(await crun.list())
    assert listed == set(kept.values()), (listed, kept, pooled)

    def pool_left() -> list[str]:
        left = [str(d) for d in Path("/sys/fs/cgroup").glob(f"*/corral/{p.node_id}/wp-*") if d.name not in kept.values()]
        left += [d.name for d in (state / "sandboxes").iterdir() if d.name not in kept.values()]
        left += [str(f) for f in (state / "owners" / "pooled").iterdir()]
        # This platform's loop devices only (other tests run beside it); the kernel clears an
        # unmounted one in a work item of its own, so a loaded host may show it a moment longer.
        left += [f for b in Path("/sys/block").glob("loop*/loop/backing_file")
                 if f"{state}/sandboxes/wp-" in (f := b.read_text().strip())
                 and not any(f"/{r}/" in f for r in kept.values())]
        return left
    try:
        await until(lambda: not pool_left(), 20, "the stopped pool's cgroups, dirs, records and loop devices to go")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {pool_left()}") from None

    await p.node.start()  # the next run adopts the sandboxes, the claimed one under its id
    for box in [*boxes, claimed]:
        assert (await p.exec(box["id"], "hostname")).json()["stdout"] == f"{box['id']}\n"
    assert await p.crun_ids() == {b["id"] for b in [*boxes, claimed]}
