"""A busy node-agent is not declared lost, a wedged one still is, and the liveness pulse never
puts back a node Redis does not have (node-agent events/pulse.py).

Real Redis and RabbitMQ. The node-agent's control path (NodeEvents over the FakeBackend, its full
heartbeat and its liveness pulse) runs on an event loop of its own in a thread, as in its own
process, so that the test can block that loop (the fault: a callback that holds it, as a burst
of creates did) while the scheduler's placer and reaper run on the test's loop.
"""

import asyncio
import threading
import time
import uuid

import pytest

from corral_common.amqp import EventBus
from corral_common.contracts.events import SandboxPlace, SandboxRequested, node_queue_name, node_routing_key
from corral_common.contracts.sandboxes import SandboxSpec
from corral_common.node_liveness import WEDGE_TIMEOUTS
from corral_common.store.state import StateStore
from corral_node_agent.backends.fake import FakeBackend
from corral_node_agent.capacity.resources import NodeCapacity, Resources
from corral_node_agent.events.pulse import LivenessPulse
from corral_node_agent.events.service import NodeEvents
from corral_node_agent.sandboxes.owners import OwnerRecords
from corral_node_agent.sandboxes.service import SandboxManager
from corral_node_agent.settings import NodeAgentSettings
from corral_scheduler.nodes.service import NodeReaper
from corral_scheduler.placement.service import Placer
from corral_scheduler.settings import SchedulerSettings
from tests.polling import until

INTERVAL_S, TIMEOUT_S = 0.2, 1.0
WEDGE_BUDGET_S = WEDGE_TIMEOUTS * TIMEOUT_S
SANDBOXES = 3


class NoLayers:
    """The FakeBackend runs nothing: an environment is no layers."""

    def add_fault_listener(self, callback):
        pass

    async def resolve_environment(self, name, tenant=""):
        return []

    async def acquire(self, layers):
        return []

    async def release(self, layers):
        pass

    def held_bytes(self) -> dict[str, int]:
        return {}

    def cleanup_orphans(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class AgentOnItsOwnLoop:
    def __init__(self, redis_url: str, amqp_url: str, tmp):
        self.node_id = f"pulse-{uuid.uuid4().hex[:6]}"
        self.settings = NodeAgentSettings(redis_url=redis_url, amqp_url=amqp_url, node_id=self.node_id,
                                          state_dir=str(tmp / self.node_id), layer_mode="eager",
                                          capacity_registry_dir=str(tmp / "capacity"), disk_capacity_mb=1_000_000, max_sandboxes=100,
                                          heartbeat_interval_s=INTERVAL_S, heartbeat_timeout_s=TIMEOUT_S,
                                          advertise_url=f"http://{self.node_id}.nodes.test:8100")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"agent-{self.node_id}", daemon=True)

    def run(self, coro):
        """Run ``coro`` on the agent's loop; awaitable from the test's."""
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    async def start(self) -> None:
        self.thread.start()
        await self.run(self._start())

    async def _start(self) -> None:
        s = self.settings
        self.manager = SandboxManager(FakeBackend(), NoLayers(), owners=OwnerRecords(f"{s.state_dir}/owners"))
        await self.manager.start()
        self.store = StateStore.from_url(s.redis_url)
        self.bus = await EventBus(s.amqp_url).connect()
        capacity = NodeCapacity(claim=Resources(16, 100_000, 100_000), cpu=64, memory_mb=100_000, pids=100_000)
        self.events = NodeEvents(s, self.store, self.bus, self.manager, capacity)
        await self.events.heartbeat_once()
        await self.bus.consume(node_queue_name(self.node_id, "place"), [node_routing_key(self.node_id, "place")],
                               SandboxPlace, self.events.on_place)
        self.heartbeats = asyncio.create_task(self.events.heartbeat_forever())
        # As app.py's lifespan does.
        self.pulse = LivenessPulse(self.node_id, s.redis_url, self.events.liveness, INTERVAL_S, timeout_s=TIMEOUT_S / 2)
        self.pulse.start()

    def block(self) -> threading.Event:
        """Hold the agent's loop (as a long synchronous call on it would) until the event is set."""
        release = threading.Event()
        self.loop.call_soon_threadsafe(release.wait, 120)
        return release

    async def close(self) -> None:
        if hasattr(self, "pulse"):
            await self.run(self._close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.to_thread(self.thread.join, 30)
        self.loop.close()

    async def _close(self) -> None:
        self.pulse.stop()
        self.heartbeats.cancel()
        await asyncio.gather(self.heartbeats, return_exceptions=True)
        await self.bus.close()
        await self.manager.close()
        await self.store.close()


@pytest.fixture
async def plane(redis_url, amqp_url, tmp_path):
    store = StateStore.from_url(redis_url)
    bus = await EventBus(amqp_url).connect()
    settings = SchedulerSettings(redis_url=redis_url, amqp_url=amqp_url, placement_retry_s=0.05,
                                 heartbeat_timeout_s=TIMEOUT_S)
    agent = AgentOnItsOwnLoop(redis_url, amqp_url, tmp_path)
    try:
        await agent.start()
        yield store, bus, Placer(store, bus, settings), NodeReaper(store, bus, TIMEOUT_S, interval_s=0.1), agent
    finally:
        await agent.close()
        await bus.close()
        await store.close()


async def request(store: StateStore) -> SandboxRequested:
    sandbox_id, spec = f"sb-{uuid.uuid4().hex[:8]}", SandboxSpec(environment="e", cpu=0.1, memory_mb=16)
    await store.create_sandbox(sandbox_id, "t1", spec)
    return SandboxRequested(sandbox_id=sandbox_id, tenant="t1", spec=spec)


async def place_sandboxes(store: StateStore, placer: Placer, agent: AgentOnItsOwnLoop) -> list[str]:
    ids = []
    for _ in range(SANDBOXES):
        event = await request(store)
        await placer.handle(event)
        ids.append(event.sandbox_id)

    async def all_running():
        return await states(store, ids) == {("running", "")}

    await until(all_running, timeout_s=20, what="the sandboxes running")
    assert sorted(agent.manager.live_ids()) == sorted(ids)
    return ids


async def states(store: StateStore, ids: list[str]) -> set[tuple[str, str]]:
    return {(r.state.value, r.reason or "") for r in [await store.get_sandbox(sid) for sid in ids]}


async def full_beat_age(store: StateStore, node_id: str) -> float:
    node = await store.get_node(node_id)
    return time.time() - node.heartbeat_at


async def test_a_loop_blocked_past_the_heartbeat_timeout_keeps_its_node_and_sandboxes(plane):
    store, _, placer, reaper, agent = plane
    ids = await place_sandboxes(store, placer, agent)
    release = agent.block()
    try:
        async def full_beat_late_and_node_never_lost() -> bool:
            assert await reaper.reap_once() == [], "a node whose loop is only busy was reaped"
            assert agent.node_id in {n.node_id for n in await store.live_nodes(TIMEOUT_S)}
            return await full_beat_age(store, agent.node_id) > 2.5 * TIMEOUT_S

        await until(full_beat_late_and_node_never_lost, timeout_s=WEDGE_BUDGET_S - TIMEOUT_S,
                    what="the full beat 2.5 heartbeat timeouts late")
        assert await store.lost_nodes(TIMEOUT_S) == []
        # The node's listing tells the truth: its full beat is late.
        assert await full_beat_age(store, agent.node_id) > 2.5 * TIMEOUT_S
        assert agent.pulse.beats > 0
        # No new sandbox goes to it meanwhile: it waits, saying why.
        late = await request(store)
        assert not await placer.try_place(late.sandbox_id)
        assert (await store.get_sandbox(late.sandbox_id)).reason == f"waiting for room: {agent.node_id} busy (heartbeat late)"
        assert await store.reserve(agent.node_id, late.sandbox_id, late.spec, TIMEOUT_S) is None
    finally:
        release.set()

    async def full_beat_fresh():
        return await full_beat_age(store, agent.node_id) < TIMEOUT_S

    await until(full_beat_fresh, timeout_s=10, what="the full beat back")
    assert await states(store, ids) == {("running", "")}
    assert sorted(agent.manager.live_ids()) == sorted(ids)
    assert await store.node_sandboxes(agent.node_id) == set(ids)
    # Caught up, it takes the one that waited.
    await until(lambda: placer.try_place(late.sandbox_id), timeout_s=10, what="the waiting sandbox placed")

    async def late_running():
        return await states(store, [late.sandbox_id]) == {("running", "")}

    await until(late_running, timeout_s=10, what="it running")


async def test_a_loop_blocked_past_the_wedge_budget_gets_its_node_reaped(plane):
    store, _, placer, reaper, agent = plane
    ids = await place_sandboxes(store, placer, agent)
    blocked_at = time.monotonic()
    release = agent.block()
    try:
        async def reaped():
            return await reaper.reap_once() == [agent.node_id]

        await until(reaped, timeout_s=WEDGE_BUDGET_S + TIMEOUT_S + 15, what="the wedged node reaped", interval_s=0.1)
        # Not before the pulse had stood in for the wedge budget.
        assert time.monotonic() - blocked_at >= WEDGE_BUDGET_S
        assert await states(store, ids) == {("failed", "node_lost")}
    finally:
        release.set()
    # Unwedged, the agent finds the tombstone and stops what it ran (the existing path).
    await until(lambda: not agent.manager.live_ids(), timeout_s=10, what="the agent stopping its sandboxes")
    await until(lambda: store.get_node(agent.node_id), timeout_s=10, what="the node live again")
    assert await store.redis.exists(f"node:{agent.node_id}:lost") == 0


async def pulses(agent: AgentOnItsOwnLoop, n: int) -> None:
    start = agent.pulse.beats
    await until(lambda: agent.pulse.beats >= start + n, timeout_s=10, what=f"{n} pulses")


async def test_the_pulse_never_puts_back_a_node_the_reaper_forgot(plane):
    store, _, placer, reaper, agent = plane
    ids = await place_sandboxes(store, placer, agent)
    release = agent.block()
    try:
        await reaper.reap(agent.node_id)  # given up while its loop is held
        await pulses(agent, 3)
        assert await store.redis.zscore("nodes", agent.node_id) is None
        assert await store.get_node(agent.node_id) is None
        assert await store.redis.exists(f"node:{agent.node_id}:lost") == 1
    finally:
        release.set()
    # The full beat, not the pulse, brings it back: after stopping what the reaper failed.
    await until(lambda: not agent.manager.live_ids(), timeout_s=10, what="the agent stopping its sandboxes")
    await until(lambda: store.get_node(agent.node_id), timeout_s=10, what="the node live again")
    assert await states(store, ids) == {("failed", "node_lost")}


async def test_the_pulse_never_puts_back_a_node_redis_lost(plane):
    store, _, placer, _, agent = plane
    ids = await place_sandboxes(store, placer, agent)
    release = agent.block()
    try:
        await store.redis.flushdb()
        await pulses(agent, 3)
        assert await store.redis.exists("nodes", f"node:{agent.node_id}") == 0
    finally:
        release.set()
    # The full beat registers what runs here before the node shows up live again.
    await until(lambda: store.get_node(agent.node_id), timeout_s=10, what="the node live again")
    assert await store.node_sandboxes(agent.node_id) == set(ids)
    assert await states(store, ids) == {("running", "")}
    assert sorted(agent.manager.live_ids()) == sorted(ids)
