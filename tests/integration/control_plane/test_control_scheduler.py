"""Scheduler placement and node-loss handling against real Redis and RabbitMQ (no node-agents)."""

import asyncio
import uuid

import pytest

from corral_common.amqp import EventBus
from corral_common.events import SandboxPlace, SandboxRequested, SandboxStateChanged
from corral_common.sandboxes import SandboxSpec, SandboxState
from corral_common.state import StateStore
from corral_scheduler.nodes.service import NodeReaper
from corral_scheduler.placement.service import Placer
from corral_scheduler.settings import SchedulerSettings


@pytest.fixture
async def plane(redis_url, amqp_url):
    store = StateStore.from_url(redis_url)
    bus = await EventBus(amqp_url).connect()
    settings = SchedulerSettings(redis_url=redis_url, amqp_url=amqp_url, placement_retry_s=0.05)
    yield store, bus, Placer(store, bus, settings)
    await bus.close()
    await store.close()


async def listen_places(bus: EventBus, node_ids: list[str]) -> asyncio.Queue:
    got: asyncio.Queue = asyncio.Queue()

    async def handler(event: SandboxPlace) -> None:
        await got.put(event)

    for node_id in node_ids:
        await bus.consume(f"test.{uuid.uuid4().hex[:6]}.{node_id}", [f"node.{node_id}.place"], SandboxPlace, handler)
    return got


async def request(store: StateStore, spec: SandboxSpec) -> SandboxRequested:
    sandbox_id = f"sb-{uuid.uuid4().hex[:8]}"
    await store.create_sandbox(sandbox_id, "t1", spec)
    return SandboxRequested(sandbox_id=sandbox_id, tenant="t1", spec=spec)


async def test_places_on_a_live_node_with_room(plane):
    store, bus, placer = plane
    a, b = f"na-{uuid.uuid4().hex[:4]}", f"nb-{uuid.uuid4().hex[:4]}"
    await store.heartbeat(a, "http://a", 4, 1000, 10)
    await store.heartbeat(b, "http://b", 4, 1000, 10)
    places = await listen_places(bus, [a, b])
    spec = SandboxSpec(environment="e", memory_mb=400, cpu=1)
    events = [await request(store, spec) for _ in range(4)]
    for event in events:
        await placer.handle(event)
    placed = [await asyncio.wait_for(places.get(), 10) for _ in events]
    by_node = {n: sum(1 for p in placed if p.node_id == n) for n in (a, b)}
    assert by_node == {a: 2, b: 2}  # spread, and 2 x 400 MB fill each node
    for event in events:
        record = await store.get_sandbox(event.sandbox_id)
        assert record.state is SandboxState.scheduled and record.node_id in (a, b)
    # A fifth one waits for room, then goes as soon as a sandbox ends.
    fifth = await request(store, spec)
    waiting = asyncio.create_task(placer.handle(fifth))
    assert not await placer.try_place(fifth)
    await store.release(events[0].sandbox_id)
    await asyncio.wait_for(waiting, 10)
    assert (await asyncio.wait_for(places.get(), 10)).sandbox_id == fifth.sandbox_id


async def test_redelivered_request_is_placed_once(plane):
    store, bus, placer = plane
    node = f"n-{uuid.uuid4().hex[:4]}"
    await store.heartbeat(node, "http://n", 4, 1000, 10)
    event = await request(store, SandboxSpec(environment="e", memory_mb=100))
    await placer.handle(event)
    await placer.handle(event)
    assert (await store.get_node(node)).used_sandboxes == 1


async def test_too_big_for_any_node_fails_unschedulable(plane):
    store, bus, placer = plane
    await store.heartbeat(f"n-{uuid.uuid4().hex[:4]}", "http://n", 4, 1000, 10)
    event = await request(store, SandboxSpec(environment="e", memory_mb=4096))
    await placer.handle(event)
    record = await store.get_sandbox(event.sandbox_id)
    assert record.state is SandboxState.failed and record.reason == "unschedulable"


async def test_deleted_before_placement_is_not_placed(plane):
    store, bus, placer = plane
    node = f"n-{uuid.uuid4().hex[:4]}"
    await store.heartbeat(node, "http://n", 4, 1000, 10)
    event = await request(store, SandboxSpec(environment="e"))
    await store.mark_delete_requested(event.sandbox_id)
    await placer.handle(event)
    assert (await store.get_sandbox(event.sandbox_id)).state is SandboxState.terminated
    assert (await store.get_node(node)).used_sandboxes == 0


async def test_lost_node_fails_its_sandboxes(plane):
    store, bus, placer = plane
    node = f"n-{uuid.uuid4().hex[:4]}"
    await store.heartbeat(node, "http://n", 4, 1000, 10)
    event = await request(store, SandboxSpec(environment="e"))
    await placer.handle(event)
    failed: asyncio.Queue = asyncio.Queue()

    async def on_failed(e: SandboxStateChanged) -> None:
        await failed.put(e)

    await bus.subscribe(["sandbox.failed"], SandboxStateChanged, on_failed)
    await store.redis.zadd("nodes", {node: 0})  # heartbeats stopped long ago
    reaper = NodeReaper(store, bus, heartbeat_timeout_s=5, interval_s=1)
    assert await reaper.reap_once() == [node]
    record = await store.get_sandbox(event.sandbox_id)
    assert record.state is SandboxState.failed and record.reason == "node_lost"
    assert (await asyncio.wait_for(failed.get(), 10)).sandbox_id == event.sandbox_id
    assert await store.get_node(node) is None
