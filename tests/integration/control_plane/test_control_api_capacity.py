"""The api refuses a disk no node could hold (422) before anything is created, against a real Redis."""

import uuid

import pytest

from corral_api.sandboxes.capacity import NodeCeilings
from corral_api.sandboxes.service import SandboxService
from corral_api.sandboxes.waiters import StateWaiters
from corral_common.contracts.sandboxes import SandboxSpec
from corral_common.store.state import StateStore
from corral_common.web.errors import Unprocessable


@pytest.fixture
async def store(redis_url):
    s = StateStore.from_url(redis_url)
    await s.redis.delete("nodes")  # only this test's nodes are live
    yield s
    await s.close()


class KnownEnvironments:
    """image-service's answer for the environment: it exists."""

    async def require_spec(self, spec, loc=("body",)) -> None:
        return None


async def test_a_disk_larger_than_every_live_node_is_a_422_and_nothing_is_created(store):
    await store.heartbeat(f"n-{uuid.uuid4().hex[:4]}", "http://a", 8, 8000, 10, disk_mb=20_000)
    await store.heartbeat(f"n-{uuid.uuid4().hex[:4]}", "http://b", 8, 8000, 10, disk_mb=50_000,
                          backends=["container", "microvm"])
    service = SandboxService(store, bus=None, history=None, waiters=StateWaiters(), environments=KnownEnvironments(),
                             max_wait_s=1, ceilings=NodeCeilings(store, 10))
    with pytest.raises(Unprocessable) as info:
        await service.create("t-disk", SandboxSpec(environment="busybox", disk_mb=60_000))
    assert info.value.code == "disk_too_large" and info.value.loc == ["body", "disk_mb"]
    assert "50000 MiB" in info.value.message
    assert await store.list_sandboxes("t-disk") == []
    # Per kind: only the microvm node holds 50 000 MiB.
    await NodeCeilings(store, 10, max_disk_mb=0, ttl_s=0).require(SandboxSpec(environment="e", backend="microvm", disk_mb=50_000))
    with pytest.raises(Unprocessable):
        await NodeCeilings(store, 10, max_disk_mb=0, ttl_s=0).require(SandboxSpec(environment="e", backend="microvm", disk_mb=50_001))


async def test_the_operators_maximum_applies_even_with_no_node_up(store):
    await NodeCeilings(store, 10, max_disk_mb=0, ttl_s=0).require(SandboxSpec(environment="e", disk_mb=1_048_576))
    with pytest.raises(Unprocessable) as info:
        await NodeCeilings(store, 10, max_disk_mb=2048, ttl_s=0).require(SandboxSpec(environment="e", disk_mb=4096))
    assert info.value.code == "disk_too_large" and "2048" in info.value.message
    # Nodes that do not advertise a disk (older agents) do not bound it.
    await store.heartbeat(f"n-{uuid.uuid4().hex[:4]}", "http://old", 8, 8000, 10)
    await NodeCeilings(store, 10, max_disk_mb=0, ttl_s=0).require(SandboxSpec(environment="e", disk_mb=1_048_576))
