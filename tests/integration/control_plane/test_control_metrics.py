"""The scrape-time gauges against a real Redis: sandboxes per state and backend, the job queue,
and each live node's capacity and reservations (a node gone stale drops out)."""

import time
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from corral_common.contracts.sandboxes import SandboxSpec, SandboxState
from corral_common.store.jobs import JobStore
from corral_common.store.state import StateStore
from tests.specs import guaranteed


@pytest.fixture
async def store(redis_url):
    s = StateStore.from_url(redis_url)
    yield s
    await s.close()


def sample(name: str, **labels) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


async def test_sandboxes_are_counted_by_state_and_backend(store):
    for i in range(3):
        await store.create_sandbox(f"sb-c{i}", "t1", SandboxSpec(environment="e", backend="container"))
    await store.create_sandbox("sb-vm", "t2", SandboxSpec(environment="e", backend="microvm"))
    await store.transition("sb-c0", SandboxState.scheduled, node_id="n1")
    await store.transition("sb-c1", SandboxState.terminated, reason="deleted")
    jobs = JobStore(store.redis)
    spec = SandboxSpec(environment="e", backend="container")
    await jobs.create_job("job-a", "t1", spec, 4)
    await jobs.enqueue("job-a", "t1", spec, 0, 4)
    await store.redis.sadd("sb:node:n1", "sb-c0")  # index sets are not records
    assert await store.count_sandboxes(scan_count=2) == {
        ("pending", "container"): 1 + 4, ("scheduled", "container"): 1, ("terminated", "container"): 1,
        ("pending", "microvm"): 1}
    assert await jobs.queue_depth() == (1, 4)
    await jobs.done_many([("job-a", "job-a-00000", True)])
    assert await jobs.queue_depth() == (1, 3)

    from corral_api.metrics import PlatformGauges

    await PlatformGauges(store, jobs)()
    assert sample("corral_sandboxes", state="pending", backend="container") == 5
    assert sample("corral_sandboxes", state="pending", backend="microvm") == 1
    assert sample("corral_sandboxes", state="running", backend="container") == 0  # every state is a series
    assert sample("corral_api_job_queue_depth") == 3 and sample("corral_api_jobs_active") == 1
    await store.transition("sb-vm", SandboxState.failed, reason="unschedulable")
    await PlatformGauges(store, jobs)()
    assert sample("corral_sandboxes", state="pending", backend="microvm") is None  # gone, not stale
    assert sample("corral_sandboxes", state="failed", backend="microvm") == 1


async def test_node_capacity_and_use(store):
    from corral_scheduler.metrics import SchedulerGauges

    await store.heartbeat("n1", "http://n1", cpu_capacity=4, memory_mb=8192, max_sandboxes=10, disk_mb=20480)
    await store.heartbeat("n2", "http://n2", cpu_capacity=2, memory_mb=4096, max_sandboxes=5, disk_mb=10240)
    spec = guaranteed(environment="e", cpu=1.5, memory_mb=512, disk_mb=2048)
    assert await store.reserve("n1", "sb-1", spec, 10)
    gauges = SchedulerGauges(store, JobStore(store.redis), SimpleNamespace(waiting=2), heartbeat_timeout_s=10)
    await gauges()
    assert sample("corral_nodes_live") == 2
    assert sample("corral_node_cpu_capacity_cores", node="n1") == 4
    assert sample("corral_node_cpu_reserved_cores", node="n1") == 1.5
    assert sample("corral_node_memory_reserved_bytes", node="n1") == 512 * 1024 * 1024
    assert sample("corral_node_disk_reserved_bytes", node="n1") == 2048 * 1024 * 1024
    assert sample("corral_node_sandboxes", node="n1") == 1 and sample("corral_node_sandboxes", node="n2") == 0
    assert sample("corral_scheduler_pending_sandboxes", via="request") == 2
    await store.redis.zadd("nodes", {"n2": time.time() - 60})  # n2's heartbeat stopped
    await gauges()
    assert sample("corral_nodes_live") == 1
    assert sample("corral_node_cpu_capacity_cores", node="n2") is None
