"""Warm pools on RabbitMQ: competing consumers on the runtime's work queue, reply-to RPC from
the api side, a burst that queues instead of failing, pool growth under a backlog."""

import asyncio
import uuid

import pytest

from corral_api.fncall.rpc import FncallRpc
from corral_common.contracts.fncall import FncallJob
from corral_node_agent.fncall.pool import RuntimePool


@pytest.fixture
async def pools(amqp_url, executor_config):
    import aio_pika

    connection = await aio_pika.connect_robust(amqp_url)
    made = []

    async def make(node_id: str, runtime: str = "bash", **kw):
        prefix = f"corral-fncall/test-{uuid.uuid4().hex[:8]}"
        pool = RuntimePool(runtime, node_id, executor_config, connection, cgroup_prefix=prefix, **kw)
        await pool.start()
        made.append((pool, prefix))
        return pool

    yield make
    for pool, prefix in made:
        await pool.close()
        for c in ("memory", "pids", "cpuacct"):
            try:
                (__import__("pathlib").Path(f"/sys/fs/cgroup/{c}") / prefix).rmdir()
            except OSError:
                pass
    await connection.close()


def bash_job(code: str, **kw) -> FncallJob:
    return FncallJob(call_id=uuid.uuid4().hex, runtime="bash", code=code, cases=[{"stdin": ""}], **kw)


async def test_burst_spreads_over_competing_nodes_and_queues(amqp_url, pools):
    node_a = await pools("node-a", min_size=2, max_size=2)
    node_b = await pools("node-b", min_size=2, max_size=2)
    rpc = await FncallRpc(amqp_url, ("bash",)).connect()
    try:
        # 4 workers in all, 24 calls of ~0.2 s at once: most wait in the queue, none fails.
        calls = [rpc.call("bash", bash_job(f"sleep 0.2; echo {i}"), timeout_s=60) for i in range(24)]
        results = await asyncio.gather(*calls)
    finally:
        await rpc.close()
    assert [r.verdict for r in results] == ["accepted"] * 24
    assert [r.cases[0].stdout for r in results] == [f"{i}\n" for i in range(24)]
    nodes = {r.node_id for r in results}
    assert nodes == {"node-a", "node-b"}
    assert node_a.size == 2 and node_b.size == 2


async def test_pool_grows_under_a_backlog_and_shrinks_when_idle(amqp_url, pools):
    pool = await pools("node-grow", min_size=1, max_size=4, scale_interval_s=0.1, idle_ticks_to_shrink=3)
    rpc = await FncallRpc(amqp_url, ("bash",)).connect()
    try:
        sizes = []

        async def sample():
            while True:
                sizes.append((pool.size, pool.busy, pool.queue_depth))
                await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample())
        results = await asyncio.gather(*(rpc.call("bash", bash_job("sleep 0.3"), timeout_s=60) for _ in range(16)))
        sampler.cancel()
        assert all(r.verdict == "accepted" for r in results)
        assert max(sizes)[0] == 4, sizes
        for _ in range(50):
            await asyncio.sleep(0.1)
            if pool.size == 1:
                break
        assert pool.size == 1
    finally:
        await rpc.close()


async def test_unanswered_call_times_out_and_expires(amqp_url):
    rpc = await FncallRpc(amqp_url, ("c",)).connect()  # no node consumes "c" here
    try:
        from corral_api.fncall.rpc import RpcTimeout

        with pytest.raises(RpcTimeout):
            await rpc.call("c", FncallJob(call_id="x", runtime="c", code=""), timeout_s=0.3)
        await asyncio.sleep(0.3)
        assert (await rpc.queue_depths())["c"] == 0  # expired, not left for a worker to run
    finally:
        await rpc.close()


async def test_a_pool_runs_as_many_calls_at_once_as_it_has_workers(amqp_url, pools):
    import time

    pool = await pools("node-par", min_size=4, max_size=4)
    rpc = await FncallRpc(amqp_url, ("bash",)).connect()
    try:
        started = time.monotonic()
        results = await asyncio.gather(*(rpc.call("bash", bash_job("sleep 0.5"), timeout_s=60) for _ in range(8)))
        elapsed = time.monotonic() - started
        await pool.scale_once()  # the channel answers while calls run
    finally:
        await rpc.close()
    assert all(r.verdict == "accepted" for r in results)
    assert elapsed < 2.5, elapsed  # 2 rounds of 4, not 8 in a row


def test_workers_of_a_dead_agent_are_removed_at_start(tmp_path, judge_rootfs):
    import subprocess
    import uuid
    from pathlib import Path

    from corral_node_agent.fncall.service import OWNER_FILE, remove_stale_instances

    finished = subprocess.Popen(["true"])
    finished.wait()
    dead_pid = finished.pid
    names = {"dead": f"t-dead-{uuid.uuid4().hex[:6]}", "live": f"t-live-{uuid.uuid4().hex[:6]}"}
    for kind, name in names.items():
        (tmp_path / name / "python-0").mkdir(parents=True)
        (tmp_path / name / OWNER_FILE).write_text(str(dead_pid if kind == "dead" else __import__("os").getpid()))
        for c in ("memory", "pids", "cpuacct"):
            (Path(f"/sys/fs/cgroup/{c}/corral-fncall") / name / "python-0").mkdir(parents=True)
    try:
        assert remove_stale_instances(tmp_path, own="me") == [names["dead"]]
        assert not (tmp_path / names["dead"]).exists()
        assert not Path(f"/sys/fs/cgroup/pids/corral-fncall/{names['dead']}").exists()
        assert Path(f"/sys/fs/cgroup/pids/corral-fncall/{names['live']}/python-0").exists()
    finally:
        for c in ("memory", "pids", "cpuacct"):
            for sub in ("python-0", ""):
                try:
                    (Path(f"/sys/fs/cgroup/{c}/corral-fncall") / names["live"] / sub).rmdir()
                except OSError:
                    pass


def test_workers_of_a_dead_agent_below_its_node_cgroup_are_removed_with_their_processes(tmp_path):
    """Agents keep their workers below the node's capped cgroup and say where in the scratch
    dir; a dead agent's workers are found there and killed."""
    import subprocess
    import uuid

    from corral_host.cgroups.detect import cgroup_driver
    from corral_host.cgroups.node import fncall_cgroup_path, node_cgroup_path
    from corral_node_agent.fncall.service import CGROUP_FILE, OWNER_FILE, remove_stale_instances

    finished = subprocess.Popen(["true"])
    finished.wait()
    node, instance = f"t-node-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:6]
    prefix = fncall_cgroup_path(node, instance)
    assert prefix == f"/corral/{node}/_fncall-{instance}"
    entry = tmp_path / f"{node}-{instance}"
    entry.mkdir()
    (entry / OWNER_FILE).write_text(str(finished.pid))
    (entry / CGROUP_FILE).write_text(prefix)
    driver = cgroup_driver()
    worker = driver.cgroup(f"{prefix}/python-0").create()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        for f in worker.procs_files():
            with open(f, "w") as fh:
                fh.write(str(sleeper.pid))
        assert remove_stale_instances(tmp_path, own="me") == [entry.name]
        assert sleeper.wait(timeout=10) == -9
        assert not any(d.exists() for d in driver.cgroup(prefix).dirs.values())
    finally:
        sleeper.kill()
        driver.cgroup(node_cgroup_path(node)).remove()


async def test_a_bundle_runs_on_free_workers_at_once_and_is_answered_in_order(amqp_url, pools):
    import time

    await pools("node-bundle", min_size=4, max_size=4)
    rpc = await FncallRpc(amqp_url, ("bash",)).connect()
    jobs = [bash_job(f"sleep 1; echo {i}") for i in range(4)] + [bash_job("exit 3")]
    try:
        started = time.monotonic()
        results = await rpc.call_bundle("bash", jobs, timeout_s=60)
        elapsed = time.monotonic() - started
    finally:
        await rpc.close()
    assert [r.call_id for r in results] == [j.call_id for j in jobs]
    assert [r.cases[0].stdout for r in results[:4]] == ["0\n", "1\n", "2\n", "3\n"]
    assert results[4].verdict == "runtime_error" and results[4].cases[0].exit_code == 3
    assert elapsed < 3.0, elapsed  # the four sleeps side by side, not one after the other (4 s)


async def test_a_batch_goes_out_in_bundles_and_every_call_is_answered_once(amqp_url, redis_url, pools):
    import redis.asyncio as aioredis

    from corral_api.fncall.schemas import FncallRequest
    from corral_api.fncall.service import FncallService
    from corral_api.fncall.settings import FncallApiSettings

    class CountingRpc(FncallRpc):  # the real client, counting the messages it sends
        messages = 0

        async def _request(self, *args, **kwargs):
            CountingRpc.messages += 1
            return await super()._request(*args, **kwargs)

    await pools("node-batch-a", min_size=2, max_size=2)
    await pools("node-batch-b", min_size=2, max_size=2)
    rpc = await CountingRpc(amqp_url, ("bash",)).connect()
    redis = aioredis.Redis.from_url(redis_url)
    service = FncallService(rpc, redis, FncallApiSettings(batch_bundle=4))
    try:
        calls = [FncallRequest(runtime="bash", code=f"echo {i}; exit $(({i} % 5 == 0))") for i in range(40)]
        batch = await service.create_batch("t", calls)
        page = await service.get_batch("t", batch.id, offset=0, limit=100, wait=True, timeout=120)
    finally:
        await service.close()
        await rpc.close()
        await redis.aclose()
    assert page.status == "done" and page.completed == 40
    assert sorted(item.index for item in page.results) == list(range(40))  # each call once
    for item in page.results:
        assert item.result.cases[0].stdout == f"{item.index}\n"
        assert item.result.verdict == ("runtime_error" if item.index % 5 == 0 else "accepted")
    assert page.verdicts == {"accepted": 32, "runtime_error": 8}
    assert CountingRpc.messages == 10  # 40 calls in bundles of 4
    assert {item.result.node_id for item in page.results} == {"node-batch-a", "node-batch-b"}


async def test_a_pool_grows_for_calls_of_a_bundle_waiting_in_the_node(amqp_url, pools):
    pool = await pools("node-bundle-grow", min_size=1, max_size=4, scale_interval_s=0.1)
    rpc = await FncallRpc(amqp_url, ("bash",)).connect()
    try:  # one message, so the queue is empty while its 8 calls wait for workers in the node
        results = await rpc.call_bundle("bash", [bash_job("sleep 0.4") for _ in range(8)], timeout_s=60)
    finally:
        await rpc.close()
    assert all(r.verdict == "accepted" for r in results)
    assert pool.size > 1


async def test_a_call_no_node_serves_fails_at_once_with_a_503_saying_so(amqp_url):
    """Issue 10: with no pool for a runtime a call waited out its queueing time (64 s)."""
    import time

    import aio_pika

    from corral_api.fncall.schemas import FncallRequest
    from corral_api.fncall.service import FncallService
    from corral_api.fncall.settings import FncallApiSettings
    from corral_common.contracts.fncall import declare_work_queue
    from corral_common.web.errors import ServiceUnavailable

    rpc = await FncallRpc(amqp_url, ("c",)).connect()  # no node consumes "c" here
    service = FncallService(rpc, None, FncallApiSettings())  # a call would queue for 60 s
    request = FncallRequest(runtime="c", code="int main(void) { return 0; }")
    try:
        started = time.monotonic()
        with pytest.raises(ServiceUnavailable) as info:
            await service.call(request)
        assert time.monotonic() - started < 2
        assert (info.value.code, info.value.loc) == ("fncall_unavailable", ["body", "runtime"])
        assert "'c'" in info.value.message
        with pytest.raises(ServiceUnavailable) as info:
            await service.create_batch("t", [FncallRequest(runtime="c", code="x")] * 3)
        assert info.value.loc == ["body", "calls", 0, "runtime"]
        assert (await rpc.queue_depths())["c"] == 0  # nothing was sent
        # Once a node consumes the queue, calls go out again.
        connection = await aio_pika.connect_robust(amqp_url)
        try:
            queue = await declare_work_queue(connection, await connection.channel(), "c")
            tag = await queue.consume(lambda message: None)
            await service.require_workers("c", ["body", "runtime"])
            await queue.cancel(tag)
        finally:
            await connection.close()
    finally:
        await rpc.close()
