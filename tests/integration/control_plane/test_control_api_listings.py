"""The listings `corral job ls` and `corral nodes` read, against a real Redis: a tenant's jobs
(never another's; deleted ones only when asked) and the live nodes' capacity (no address)."""

import time
import uuid

import pytest

from corral_api.jobs.service import JobService
from corral_api.nodes.service import NodeService
from corral_common.contracts.sandboxes import SandboxSpec
from corral_common.store.jobs import JobStore
from corral_common.store.state import StateStore
from tests.specs import guaranteed


@pytest.fixture
async def store(redis_url):
    s = StateStore.from_url(redis_url)
    await s.redis.delete("nodes")  # only this test's nodes are live
    yield s
    await s.close()


async def test_a_tenant_lists_its_own_jobs_newest_first(store):
    jobs = JobStore(store.redis)
    service = JobService(jobs, sandboxes=None)
    mine, theirs = f"t-{uuid.uuid4().hex[:6]}", f"t-{uuid.uuid4().hex[:6]}"
    spec = SandboxSpec(environment="busybox")
    old, new, gone, other = (f"job-{uuid.uuid4().hex[:8]}" for _ in range(4))
    await jobs.create_job(old, mine, spec, 2, created_at=time.time() - 60)
    await jobs.create_job(new, mine, spec, 3, weight=2.0)
    await jobs.create_job(gone, mine, spec, 1)
    await jobs.mark_deleted(gone)
    await jobs.create_job(other, theirs, spec, 1)
    listed = await service.of_tenant(mine)
    assert [(j.id, j.count, j.weight) for j in listed] == [(new, 3, 2.0), (old, 2, 1.0)]
    assert {j.id for j in await service.of_tenant(mine, include_deleted=True)} == {old, new, gone}
    assert [j.id for j in await service.of_tenant(theirs)] == [other]
    assert await service.of_tenant(f"t-{uuid.uuid4().hex[:6]}") == []


async def test_live_nodes_with_capacity_and_use_but_not_their_address(store):
    node_a, node_b = f"a-{uuid.uuid4().hex[:4]}", f"b-{uuid.uuid4().hex[:4]}"
    await store.heartbeat(node_a, "http://10.0.0.1:9000", 4, 8000, 20, disk_mb=50_000, pids=4096)
    await store.heartbeat(node_b, "http://10.0.0.2:9000", 2, 4000, 10, backends=("container", "vm"))
    spec = guaranteed(environment="busybox", cpu=1.5, memory_mb=512, disk_mb=1024)  # what the node shows as used
    sandbox_id = f"sb-{uuid.uuid4().hex[:8]}"
    assert await store.reserve(node_a, sandbox_id, spec, timeout_s=60) == node_a
    nodes = await NodeService(store, heartbeat_timeout_s=30).live()
    assert [n.node_id for n in nodes] == sorted([node_a, node_b])
    by_id = {n.node_id: n for n in nodes}
    a, b = by_id[node_a], by_id[node_b]
    assert (a.cpu, a.memory_mb, a.max_sandboxes, a.disk_mb, a.pids) == (4.0, 8000, 20, 50_000, 4096)
    assert (a.used_cpu, a.used_memory_mb, a.used_sandboxes, a.used_disk_mb) == (1.5, 512, 1, 1024)
    assert (b.used_cpu, b.used_sandboxes) == (0.0, 0)
    assert (b.backends, b.disk_mb) == (["container", "vm"], None)
    assert 0 <= a.heartbeat_age_s < 30
    assert "url" not in a.model_dump() and "10.0.0.1" not in a.model_dump_json()
    # a node whose heartbeat is older than the timeout is not live
    assert await NodeService(store, heartbeat_timeout_s=-1).live() == []
    await store.release(sandbox_id)
