"""Scheduler placement and node-loss handling against real Redis and RabbitMQ (no node-agents)."""

import asyncio
import uuid

import pytest

from corral_common.amqp import EventBus
from corral_common.contracts.events import SandboxPlace, SandboxRequested, SandboxStateChanged
from corral_common.contracts.sandboxes import SandboxSpec, SandboxState
from corral_common.store.state import StateStore
from corral_scheduler.nodes.service import NodeReaper
from corral_scheduler.placement.outcomes import PlaceOutcome
from corral_scheduler.placement.service import Placer
from corral_scheduler.settings import SchedulerSettings
from tests.specs import guaranteed


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
    spec = guaranteed(environment="e", memory_mb=400, cpu=1)
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
    assert await placer.try_place(fifth.sandbox_id) is PlaceOutcome.no_room
    await store.release(events[0].sandbox_id)
    await asyncio.wait_for(waiting, 10)
    assert (await asyncio.wait_for(places.get(), 10)).sandbox_id == fifth.sandbox_id


async def test_redelivered_request_is_placed_once(plane):
    store, bus, placer = plane
    node = f"n-{uuid.uuid4().hex[:4]}"
    await store.heartbeat(node, "http://n", 4, 1000, 10)
    event = await request(store, guaranteed(environment="e", memory_mb=100))
    await placer.handle(event)
    await placer.handle(event)
    assert (await store.get_node(node)).used_sandboxes == 1


async def test_two_schedulers_racing_on_one_sandbox_place_it_once_and_keep_its_reservation(plane):
    """Two schedulers (two job admitters peeking the same head, or a redelivery racing the
    first delivery) try the same sandbox at once: one wins, and the loser must not give back
    the reservation the winner placed it with."""
    store, bus, _ = plane
    settings = SchedulerSettings(redis_url="redis://unused", amqp_url="amqp://unused", placement_retry_s=0.05)
    placers = [Placer(store, bus, settings) for _ in range(2)]
    nodes = [f"n{i}-{uuid.uuid4().hex[:4]}" for i in range(2)]
    for node in nodes:
        await store.heartbeat(node, f"http://{node}", 64, 100_000, 100)
    events = [await request(store, guaranteed(environment="e", memory_mb=100)) for _ in range(20)]
    for event in events:
        outcomes = await asyncio.gather(*(p.try_place(event.sandbox_id) for p in placers))
        assert sorted(outcomes) == [PlaceOutcome.already_placed, PlaceOutcome.placed]
    for event in events:
        record = await store.get_sandbox(event.sandbox_id)
        assert record.state is SandboxState.scheduled
        assert await store.reservation_node(event.sandbox_id) == record.node_id
    infos = [await store.get_node(n) for n in nodes]
    assert sum(i.used_sandboxes for i in infos) == len(events)
    assert sum(i.used_memory_mb for i in infos) == 100 * len(events)
    holders = [await store.node_sandboxes(n) for n in nodes]
    assert not holders[0] & holders[1] and holders[0] | holders[1] == {e.sandbox_id for e in events}


async def test_too_big_for_any_node_fails_unschedulable(plane):
    store, bus, placer = plane
    await store.heartbeat(f"n-{uuid.uuid4().hex[:4]}", "http://n", 4, 1000, 10)
    event = await request(store, guaranteed(environment="e", memory_mb=4096))
    await placer.handle(event)
    record = await store.get_sandbox(event.sandbox_id)
    assert record.state is SandboxState.failed and record.reason == "unschedulable"
    # The record says why in words: what the node lacks even when empty.
    assert record.error.startswith("no live node can ever hold it: n-") and "memory (1000 MB < 4096 MB)" in record.error


async def test_disk_is_placed_where_there_is_room_for_it(plane):
    store, bus, placer = plane
    small, big = f"ns-{uuid.uuid4().hex[:4]}", f"nb-{uuid.uuid4().hex[:4]}"
    await store.heartbeat(small, "http://s", 64, 100_000, 100, disk_mb=2_000)
    await store.heartbeat(big, "http://b", 4, 1000, 10, disk_mb=50_000)  # fuller by cpu/memory shares
    places = await listen_places(bus, [small, big])
    event = await request(store, guaranteed(environment="e", memory_mb=64, disk_mb=20_000))
    await placer.handle(event)
    assert (await asyncio.wait_for(places.get(), 10)).node_id == big
    assert (await store.get_node(big)).used_disk_mb == 20_000


async def test_a_disk_larger_than_any_node_fails_unschedulable(plane):
    store, bus, placer = plane
    await store.heartbeat(f"n-{uuid.uuid4().hex[:4]}", "http://n", 64, 100_000, 100, disk_mb=2_000)
    event = await request(store, guaranteed(environment="e", memory_mb=64, disk_mb=4_000))
    await placer.handle(event)
    record = await store.get_sandbox(event.sandbox_id)
    assert record.state is SandboxState.failed and record.reason == "unschedulable"
    assert "disk (2000 MB < 4000 MB)" in record.error and "memory" not in record.error


async def test_deleted_before_placement_is_not_placed(plane):
    store, bus, placer = plane
    node = f"n-{uuid.uuid4().hex[:4]}"
    await store.heartbeat(node, "http://n", 4, 1000, 10)
    event = await request(store, guaranteed(environment="e"))
    await store.mark_delete_requested(event.sandbox_id)
    await placer.handle(event)
    assert (await store.get_sandbox(event.sandbox_id)).state is SandboxState.terminated
    assert (await store.get_node(node)).used_sandboxes == 0


async def test_lost_node_fails_its_sandboxes(plane):
    store, bus, placer = plane
    node = f"n-{uuid.uuid4().hex[:4]}"
    await store.heartbeat(node, "http://n", 4, 1000, 10)
    event = await request(store, guaranteed(environment="e"))
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
    assert record.error.startswith(f"node {node} sent no heartbeat for ") and "past the 30 s" in record.error
    assert (await asyncio.wait_for(failed.get(), 10)).sandbox_id == event.sandbox_id
    assert await store.get_node(node) is None


async def test_a_silent_node_whose_port_still_accepts_is_spared_until_the_wedge_budget(plane):
    """A stalled agent process (every thread stopped: direct reclaim) still has its listening
    socket, and the kernel completes handshakes into its backlog: a socket that listens and is
    never accepted from is exactly that. Its node is not reaped until the budget has passed;
    a node whose port refuses is reaped at once."""
    import socket
    import time

    from corral_common.node_liveness import WEDGE_TIMEOUTS

    store, bus, placer = plane
    stalled_agent = socket.create_server(("127.0.0.1", 0), backlog=8)  # never accept()ed
    dead_agent = socket.create_server(("127.0.0.1", 0))
    dead_port = dead_agent.getsockname()[1]
    dead_agent.close()  # its port now refuses
    stalled, dead = f"ns-{uuid.uuid4().hex[:4]}", f"nd-{uuid.uuid4().hex[:4]}"
    try:
        await store.heartbeat(stalled, f"http://127.0.0.1:{stalled_agent.getsockname()[1]}", 4, 1000, 10)
        await store.heartbeat(dead, f"http://127.0.0.1:{dead_port}", 4, 1000, 10)
        event = await request(store, guaranteed(environment="e"))
        await placer.try_place(event.sandbox_id, stalled)
        on_dead = await request(store, guaranteed(environment="e"))
        await placer.try_place(on_dead.sandbox_id, dead)
        reaper = NodeReaper(store, bus, heartbeat_timeout_s=5, interval_s=1)
        silent_since = time.time() - 2 * 5  # two timeouts silent: past the timeout, within the budget
        await store.redis.zadd("nodes", {stalled: silent_since, dead: silent_since})
        assert await reaper.reap_once() == [dead]
        lost = await store.get_sandbox(on_dead.sandbox_id)
        assert lost.reason == "node_lost" and lost.error.startswith(f"node {dead} sent no heartbeat for 1"), lost.error
        assert lost.error.endswith(" s (timeout 5 s), and its agent refused connections"), lost.error
        assert await reaper.reap_once() == []  # and again: spared, not reaped on a later pass
        record = await store.get_sandbox(event.sandbox_id)
        assert (record.state, record.node_id) == (SandboxState.scheduled, stalled)
        assert await store.get_node(stalled) is not None
        # Silent for the whole budget: alive or not, it is given up.
        await store.redis.zadd("nodes", {stalled: time.time() - WEDGE_TIMEOUTS * 5 - 1})
        assert await reaper.reap_once() == [stalled]
        record = await store.get_sandbox(event.sandbox_id)
        assert (record.state, record.reason) == (SandboxState.failed, "node_lost")
        assert record.error.endswith(", past the 30 s a stalled node is given"), record.error
    finally:
        stalled_agent.close()


# ---- sandbox kinds (container / microvm / vm) ---------------------------------------------


async def test_vm_goes_only_to_a_node_that_runs_vms_and_reserves_the_overhead(plane):
    store, bus, placer = plane
    plain, vm_node = f"nc-{uuid.uuid4().hex[:4]}", f"nv-{uuid.uuid4().hex[:4]}"
    # The container-only node is emptier, so spread alone would pick it.
    await store.heartbeat(plain, "http://c", 64, 100_000, 100)
    await store.heartbeat(vm_node, "http://v", 4, 1000, 10, backends=["container", "microvm", "vm"],
                          accelerator="tcg", vm_memory_overhead_mb=100)
    places = await listen_places(bus, [plain, vm_node])
    event = await request(store, guaranteed(environment="e", isolation="vm", memory_mb=400))
    await placer.handle(event)
    assert (await asyncio.wait_for(places.get(), 10)).node_id == vm_node
    node = await store.get_node(vm_node)
    assert node.used_memory_mb == 500 and node.accelerator == "tcg" and "microvm" in node.backends
    # 500 MB left: a second 400 MB microVM needs 500 with its overhead and fits exactly; a
    # third waits for room rather than failing (the node could hold it when empty).
    second = await request(store, guaranteed(environment="e", backend="microvm", memory_mb=400))
    await placer.handle(second)
    third = await request(store, guaranteed(environment="e", backend="microvm", memory_mb=400))
    assert await placer.try_place(third.sandbox_id) is PlaceOutcome.no_room
    assert (await store.get_sandbox(third.sandbox_id)).state is SandboxState.pending
    await store.release(second.sandbox_id)
    assert await placer.try_place(third.sandbox_id) is PlaceOutcome.placed
    assert (await store.get_sandbox(third.sandbox_id)).node_id == vm_node


async def test_vm_with_no_vm_capable_node_is_unschedulable(plane):
    store, bus, placer = plane  # the redis_url fixture starts each test with no nodes
    await store.heartbeat(f"n-{uuid.uuid4().hex[:4]}", "http://n", 64, 100_000, 100)  # containers only
    event = await request(store, guaranteed(environment="e", display=True))
    await asyncio.wait_for(placer.handle(event), 10)
    record = await store.get_sandbox(event.sandbox_id)
    assert record.state is SandboxState.failed and record.reason == "unschedulable"
    assert "backend vm (runs container)" in record.error, record.error


async def test_required_node_is_honoured_and_its_loss_fails_the_request(plane):
    store, bus, placer = plane
    home, other = f"nh-{uuid.uuid4().hex[:4]}", f"no-{uuid.uuid4().hex[:4]}"
    kinds = ["container", "microvm", "vm"]
    await store.heartbeat(home, "http://h", 4, 2000, 10, backends=kinds)
    await store.heartbeat(other, "http://o", 64, 100_000, 100, backends=kinds)  # emptier
    places = await listen_places(bus, [home, other])
    spec = guaranteed(from_snapshot="snap-1", environment="e", backend="microvm", memory_mb=256)
    sandbox_id = f"sb-{uuid.uuid4().hex[:8]}"
    await store.create_sandbox(sandbox_id, "t1", spec, required_node=home)
    # The node comes from the record too (a job admitter re-reads records, not events).
    await placer.handle(SandboxRequested(sandbox_id=sandbox_id, tenant="t1", spec=spec))
    assert (await asyncio.wait_for(places.get(), 10)).node_id == home

    gone = f"ng-{uuid.uuid4().hex[:4]}"
    event = await request(store, spec)
    event.node_id = gone
    await asyncio.wait_for(placer.handle(event), 10)
    record = await store.get_sandbox(event.sandbox_id)
    assert record.state is SandboxState.failed and record.reason == "required_node_unavailable"
    assert record.error == f"node {gone} (the only one that may take it) is not live"


# ---- pids (each node's cgroup pids cap) -------------------------------------------------------


async def test_the_scheduler_never_places_past_a_nodes_pids(plane):
    store, bus, placer = plane
    node = f"np-{uuid.uuid4().hex[:4]}"
    await store.heartbeat(node, "http://n", 64, 100_000, 100, pids=1000)
    spec = guaranteed(environment="e", memory_mb=64, cpu=0.1, pids_limit=600)
    first = await request(store, spec)
    await placer.handle(first)
    assert (await store.get_node(node)).used_pids == 600
    second = await request(store, spec)
    assert await placer.try_place(second.sandbox_id) is PlaceOutcome.no_room  # cpu and memory would fit: pids do not
    assert (await store.get_sandbox(second.sandbox_id)).state is SandboxState.pending
    assert await store.release(first.sandbox_id)
    assert (await store.get_node(node)).used_pids == 0
    assert await placer.try_place(second.sandbox_id) is PlaceOutcome.placed
    assert (await store.get_sandbox(second.sandbox_id)).node_id == node


async def test_a_pids_limit_no_node_allows_is_unschedulable_and_leaves_nothing(plane):
    store, bus, placer = plane
    node = f"np-{uuid.uuid4().hex[:4]}"
    await store.heartbeat(node, "http://n", 64, 100_000, 100, pids=1000)
    event = await request(store, guaranteed(environment="e", pids_limit=1001))
    await asyncio.wait_for(placer.handle(event), 10)
    record = await store.get_sandbox(event.sandbox_id)
    assert record.state is SandboxState.failed and record.reason == "unschedulable"
    info = await store.get_node(node)
    assert (info.used_pids, info.used_sandboxes) == (0, 0)
    assert await store.reservation_node(event.sandbox_id) is None
