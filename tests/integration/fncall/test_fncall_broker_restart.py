"""fncall across a RabbitMQ restart (a broker of the test's own, tests/control_plane.py): calls
queued, running, and sent while the broker is down are all answered, each with its own
result. The work queue is a quorum queue (its calls survive), a worker's reply is confirmed
before its call is acked (a call whose reply could not be sent runs again), and the api's
reply queue is a quorum queue of its own (a reply the broker held survives too)."""

import asyncio
import uuid
from pathlib import Path

from corral_api.fncall.rpc import FncallRpc
from corral_common.amqp import connect
from corral_common.contracts.fncall import FncallJob
from corral_node_agent.fncall.pool import RuntimePool
from tests.polling import until

CALLS_BEFORE, CALLS_DURING = 24, 8


def bash_job(i: int) -> FncallJob:
    return FncallJob(call_id=uuid.uuid4().hex, runtime="bash", code=f"sleep 0.2; echo {i}", cases=[{"stdin": ""}])


async def test_calls_in_flight_across_a_broker_restart_are_all_answered(private_broker, executor_config):
    broker = private_broker
    connection = await connect(broker.url)
    prefix = f"corral-fncall/test-{uuid.uuid4().hex[:8]}"
    pool = RuntimePool("bash", "node-restart", executor_config, connection, min_size=2, max_size=2,
                       cgroup_prefix=prefix, publish_timeout_s=90)
    await pool.start()
    rpc = await FncallRpc(broker.url, ("bash",), publish_timeout_s=90).connect()
    try:
        # 2 workers, 24 calls of 0.2 s: some run, most wait in the work queue when it stops.
        before = [asyncio.create_task(rpc.call("bash", bash_job(i), timeout_s=120)) for i in range(CALLS_BEFORE)]
        await until(lambda: pool.busy > 0, timeout_s=30, what="calls running")
        await asyncio.to_thread(broker.stop)
        during = [asyncio.create_task(rpc.call("bash", bash_job(CALLS_BEFORE + i), timeout_s=120))
                  for i in range(CALLS_DURING)]
        await asyncio.to_thread(broker.start)
        results = await asyncio.wait_for(asyncio.gather(*before, *during), 120)
    finally:
        await rpc.close()
        await pool.close()
        await connection.close()
        for c in ("memory", "pids", "cpuacct"):
            try:
                (Path(f"/sys/fs/cgroup/{c}") / prefix).rmdir()
            except OSError:
                pass
    assert [r.verdict for r in results] == ["accepted"] * (CALLS_BEFORE + CALLS_DURING)
    assert [r.cases[0].stdout for r in results] == [f"{i}\n" for i in range(CALLS_BEFORE + CALLS_DURING)]
