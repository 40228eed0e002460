"""The warm pool's rules (sandboxes/warm_pool.py) with a stand-in backend: which creates it
serves, how many it keeps per shape and for how long, what a failed start ahead costs, and
that it fills only while no create is being started, and waits for a burst to end while it
still has some ready. (With real crun: the integration test.)"""

import asyncio

import pytest

from corral_common.contracts.sandboxes import SandboxSpec
from corral_node_agent.backends.types import RootFs
from corral_node_agent.errors import StartFailed
from corral_node_agent.sandboxes.warm_pool import (
    DEMAND_WINDOW_S,
    MAX_SHAPES,
    REFILL_SETTLE_S,
    RETRY_AFTER_S,
    WarmPool,
)

pytestmark = pytest.mark.asyncio

SPEC = SandboxSpec(environment="busybox", backend="container", memory_mb=64)


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


class Backend:
    def __init__(self) -> None:
        self.started: list[str] = []
        self.stopped: list[str] = []
        self.fail = False

    async def start_ahead(self, runtime_id: str, spec: SandboxSpec, rootfs: RootFs) -> None:
        if self.fail:
            raise StartFailed("no room")
        self.started.append(runtime_id)

    async def stop(self, runtime_id: str) -> None:
        self.stopped.append(runtime_id)


class Harness:
    def __init__(self, size: int = 2, idle_s: float = 600.0, slots: int = 1 << 30, max_size: int = 0) -> None:
        self.clock, self.backend = Clock(), Backend()
        self.acquired = self.released = 0
        self.quiet = asyncio.Event()
        self.quiet.set()
        self.slots = slots  # the node's max_sandboxes, nothing else running
        self.pool = WarmPool(self.backend, size=size, idle_s=idle_s, max_size=max_size,
                             new_entry=lambda spec, tenant, layers: object(),
                             acquire=self._acquire, release=self._release, quiet=self.quiet.wait,
                             room=lambda: self.slots - self.pool.count(), clock=self.clock)

    async def _acquire(self, entry) -> RootFs:
        self.acquired += 1
        return RootFs(layers=["/layer"])

    async def _release(self, entry) -> None:
        self.released += 1

    async def settle(self) -> None:
        for _ in range(50):
            await asyncio.sleep(0)

    async def after_burst(self) -> None:
        """No create has asked for any shape for REFILL_SETTLE_S."""
        self.clock.now += REFILL_SETTLE_S
        self.pool._wake_up()
        await self.settle()


async def test_a_shape_is_filled_once_asked_for_and_served_one_sandbox_per_create():
    h = Harness(size=2)
    h.pool.start()
    assert h.pool.take(SPEC, "acme") is None  # nothing ready yet: this create starts its own
    await h.after_burst()
    assert h.pool.ready_count() == 2 and len(h.backend.started) == 2
    first, second = h.pool.take(SPEC, "acme"), h.pool.take(SPEC.model_copy(update={"timeout_s": 5}), "acme")
    assert {first.runtime_id, second.runtime_id} == set(h.backend.started)
    assert (h.pool.hits, h.pool.misses) == (2, 1)
    assert h.pool.owns(first.runtime_id)  # taken, not claimed yet: an end meanwhile is nobody's
    h.pool.claimed(first)
    assert not h.pool.owns(first.runtime_id)
    assert h.pool.take(SPEC, "globex") is None  # another tenant is another shape
    await h.pool.close()


async def test_only_containers_without_network_snapshot_or_disk_image_are_pooled():
    h = Harness()
    for spec in (SPEC.model_copy(update={"backend": "microvm"}), SPEC.model_copy(update={"environment": ""}),
                 SPEC.model_copy(update={"from_snapshot": "snap"}),
                 SandboxSpec(environment="busybox", backend="container", network={"allow": ["pypi.org"]})):
        assert h.pool.take(spec, "acme") is None
    assert h.pool._shapes == {}


async def test_it_fills_only_while_no_create_is_being_started():
    h = Harness(size=1)
    h.quiet.clear()
    h.pool.start()
    h.pool.take(SPEC, "acme")
    await h.settle()
    assert h.backend.started == []
    h.quiet.set()
    await h.settle()
    assert len(h.backend.started) == 1
    await h.pool.close()


async def test_a_shape_with_some_ready_is_refilled_once_its_burst_is_over_an_empty_one_at_once():
    h = Harness(size=3)
    h.pool.start()
    h.pool.take(SPEC, "acme")
    await h.settle()
    assert len(h.backend.started) == 1  # none was ready: the next create of a stream needs one
    await h.after_burst()
    assert h.pool.ready_count() == 3
    for _ in range(2):  # a burst takes two of the three
        assert h.pool.take(SPEC, "acme") is not None
        await h.settle()
        h.clock.now += REFILL_SETTLE_S / 4
    assert len(h.backend.started) == 3 and h.pool.ready_count() == 1
    await h.after_burst()
    assert len(h.backend.started) == 5 and h.pool.ready_count() == 3
    for _ in range(3):  # one that empties it: refilled in the next gap, burst or not
        h.pool.take(SPEC, "acme")
    await h.settle()
    assert len(h.backend.started) == 6
    await h.pool.close()


async def test_it_fills_only_the_nodes_free_slots_and_gives_one_up_for_another_shape():
    h = Harness(size=4, slots=3)
    h.pool.start()
    a, b = SPEC, SPEC.model_copy(update={"memory_mb": 96})
    h.pool.take(a, "acme")
    await h.after_burst()
    h.pool.take(b, "acme")
    await h.after_burst()
    assert h.pool.count() == 3 and h.pool.ready_by_shape() and len(h.backend.started) == 3
    assert h.pool.has_ready(a, "acme") and not h.pool.has_ready(a, "globex")
    # b was asked for last: a (least recently asked for) gives one up
    before = h.pool.ready_by_shape()
    assert await h.pool.make_room()
    after = h.pool.ready_by_shape()
    key_a = next(k for k in before if before[k] == max(before.values()))
    assert after.get(key_a, 0) == before[key_a] - 1 and len(h.backend.stopped) == 1 and h.released == 1
    h.slots = 2  # the freed slot went to a sandbox
    await h.after_burst()
    assert len(h.backend.started) == 3
    await h.pool.close()
    assert not await h.pool.make_room()  # nothing left to give


async def test_a_failed_start_ahead_is_not_retried_at_once_and_releases_what_it_took():
    h = Harness(size=1)
    h.backend.fail = True
    h.pool.start()
    h.pool.take(SPEC, "acme")
    await h.settle()
    assert h.pool.ready_count() == 0 and h.acquired == h.released == 1
    h.backend.fail = False
    h.pool.take(SPEC, "acme")
    await h.settle()
    assert h.backend.started == []  # within RETRY_AFTER_S of the failure
    h.clock.now += RETRY_AFTER_S
    h.pool.take(SPEC, "acme")
    await h.settle()
    assert len(h.backend.started) == 1
    await h.pool.close()


async def test_an_idle_shape_is_drained_and_the_least_recently_asked_for_goes_first():
    h = Harness(size=1, idle_s=600)
    h.pool.start()
    specs = [SPEC.model_copy(update={"memory_mb": 64 + i}) for i in range(MAX_SHAPES + 1)]
    for spec in specs:
        h.pool.take(spec, "acme")
        await h.settle()
    # One shape too many: the oldest one's sandbox was stopped and released.
    assert h.pool.ready_count() == MAX_SHAPES and len(h.backend.stopped) == 1
    h.clock.now += 600
    h.pool._wake_up()
    await h.settle()
    assert h.pool.ready_count() == 0 and len(h.backend.stopped) == MAX_SHAPES + 1
    assert h.released == MAX_SHAPES + 1
    await h.pool.close()


async def test_a_pooled_sandbox_that_ends_is_forgotten_and_replaced():
    h = Harness(size=1)
    h.pool.start()
    h.pool.take(SPEC, "acme")
    await h.settle()
    (runtime_id,) = h.backend.started
    assert h.pool.owns(runtime_id)
    await h.pool.ended(runtime_id)
    assert not h.pool.owns(runtime_id) and h.released == 1
    await h.settle()
    assert len(h.backend.started) == 2 and h.pool.ready_count() == 1
    await h.pool.close()
    assert h.backend.stopped == [h.backend.started[1]]


async def test_a_shape_is_its_pinned_layers_and_is_filled_on_them():
    """Each create's pinned layers are part of its shape: a create pinned to other layers (its
    environment re-pointed) is another shape, and each shape is started ahead on its own pin."""
    from corral_common.contracts.images import EnvironmentLayer

    def pin(version: str) -> tuple[EnvironmentLayer, ...]:
        return (EnvironmentLayer(kind="base", name="busybox", version=version, digest="sha256:" + version * 64,
                                 size=1),)

    h = Harness(size=1)
    entries: list[tuple] = []
    h.pool._new_entry = lambda spec, tenant, layers: entries.append(layers) or object()
    h.pool.start()
    assert h.pool.take(SPEC, "acme", pin("1")) is None
    await h.after_burst()
    assert entries == [pin("1")]  # started on the pin of the create that asked for the shape
    assert h.pool.take(SPEC, "acme", pin("2")) is None  # re-pointed: not the v1 container
    assert not h.pool.has_ready(SPEC, "acme", pin("2")) and h.pool.has_ready(SPEC, "acme", pin("1"))
    await h.after_burst()
    assert entries == [pin("1"), pin("2")]
    assert h.pool.take(SPEC, "acme", pin("1")) is not None and h.pool.take(SPEC, "acme", pin("2")) is not None


async def test_by_default_a_shape_gets_what_its_demand_asks_up_to_the_cap_and_none_when_idle():
    """The shipped default (no fixed size, a demand cap): a one-off shape gets nothing, a
    stream grows its pool up to the cap, a quiet minute shrinks the target, idle_s drains it."""
    h = Harness(size=0, max_size=3, idle_s=120.0)
    h.pool.start()
    assert h.pool.take(SPEC, "acme") is None
    await h.after_burst()
    assert h.pool.ready_count() == 0 and h.backend.started == []  # asked once: nothing started ahead
    h.pool.take(SPEC, "acme")
    await h.after_burst()
    assert h.pool.ready_count() == 1  # asked twice in a minute: one kept ready
    for _ in range(10):  # a burst: each takes what is ready, the rest start their own
        h.pool.take(SPEC, "acme")
    await h.after_burst()
    assert h.pool.ready_count() == 3  # grown to the cap, not to the burst's size
    # Demand gone: past the window the target falls to 0 (nothing more is started) ...
    h.clock.now += DEMAND_WINDOW_S + 1
    started = len(h.backend.started)
    h.pool.take(SPEC, "acme")  # one create takes one; a lone ask wants none back
    await h.after_burst()
    assert len(h.backend.started) == started and h.pool.ready_count() == 2
    # ... and idle_s after the last create the shape is drained to zero.
    h.clock.now += 121
    h.pool._wake_up()
    await h.settle()
    assert h.pool.ready_count() == 0 and len(h.backend.stopped) == 2
    await h.pool.close()


async def test_the_pool_holds_at_most_max_sandboxes_every_shape_together():
    """Demand grows each shape up to max, but the pool's bound (memory, pids: each pooled
    sandbox is an idle init) is the node's, not each shape's."""
    h = Harness(size=0, max_size=3)
    h.pool.start()
    a, b = SPEC, SPEC.model_copy(update={"memory_mb": 96})
    for _ in range(10):
        h.pool.take(a, "acme")
        h.pool.take(b, "acme")
    await h.after_burst()
    assert h.pool.count() == 3 and len(h.backend.started) == 3
    assert all(t == 3 for t in (s.target(h.clock.now, 0, 3) for s in h.pool.shapes()))  # each wants 3
    await h.pool.close()
    assert sorted(h.backend.stopped) == sorted(h.backend.started)


async def test_it_fills_only_the_requests_the_node_leaves_free():
    """``fits``: the node's capacity less its sandboxes' requests and the pool's own (held)."""
    capacity_mb, sandboxes_mb = 256, 64
    h = Harness(size=0, max_size=8)
    h.pool._fits = lambda spec: sandboxes_mb + h.pool.held()[1] + spec.reservation.memory_mb <= capacity_mb
    spec = SandboxSpec(environment="busybox", backend="container", memory_mb=128, requests={"memory_mb": 64})
    h.pool.start()
    for _ in range(10):
        h.pool.take(spec, "acme")
    await h.after_burst()
    assert h.pool.count() == 3 and h.pool.held()[1] == 192  # 64 + 3 x 64 = the node's 256
    sandboxes_mb = 192  # two more sandboxes placed: the pool fills no more (it gives way: make_room)
    assert await h.pool.make_room() and h.pool.count() == 2
    await h.after_burst()
    assert h.pool.count() == 2
    await h.pool.close()


async def test_close_lets_a_start_in_flight_finish_and_stops_it():
    """A pooled sandbox being started when the agent stops is stopped too, not left running
    with nobody knowing of it (a cancel in the middle of its start would)."""
    h = Harness(size=1)
    gate = asyncio.Event()
    started = h.backend.start_ahead

    async def slow_start(runtime_id, spec, rootfs):
        await started(runtime_id, spec, rootfs)  # crun has run it ...
        await gate.wait()  # ... and the start goes on (its init's checks)

    h.backend.start_ahead = slow_start
    h.pool.start()
    h.pool.take(SPEC, "acme")
    await h.settle()
    assert len(h.backend.started) == 1 and h.pool.ready_count() == 0
    closing = asyncio.ensure_future(h.pool.close())
    await h.settle()
    assert not closing.done()
    gate.set()
    await closing
    assert h.backend.stopped == h.backend.started and h.acquired == h.released == 1
    assert h.pool.count() == 0


async def test_a_pool_turned_on_is_bounded_demand_sized_and_shrinks_when_idle(tmp_path):
    """The manager the agent builds with max set has a pool, bounded (max), demand-sized (no
    fixed floor) and shrinking when idle."""
    from corral_node_agent.backends.container import ContainerBackend
    from corral_node_agent.sandboxes.service import build_manager
    from corral_node_agent.sandboxes.settings import WarmPoolSettings
    from corral_node_agent.settings import NodeAgentSettings

    settings = NodeAgentSettings(state_dir=str(tmp_path), image_service_url="http://image-service",
                                 warm_pool=WarmPoolSettings(max=32))
    manager = build_manager(settings, backends=ContainerBackend(settings))
    assert manager.pool is not None
    assert (manager.pool.size, 0 < manager.pool.limit <= 64, manager.pool.idle_s) == (0, True, 120.0)


async def test_the_disk_a_node_advertises_free_is_its_room_whatever_its_pool_holds():
    """Pooled disks are thin (real space only as written, which the room above the watermark
    already sees) and nobody reserved them: counted as used, the node advertised their requests
    as free room on top of its real room (the scheduler's free = advertised - reserved)."""
    from corral_node_agent.capacity.disk import advertised_disk_mb
    from corral_node_agent.sandboxes.registry import SandboxRegistry

    h = Harness(size=3)
    h.pool.start()
    h.pool.take(SandboxSpec(environment="busybox", backend="container", disk_mb=512), "acme")
    await h.after_burst()
    assert h.pool.ready_count() == 3
    registry = SandboxRegistry({"container": h.backend}, max_sandboxes=0, vm_memory_overhead_mb=0, memory=None)
    registry.pool = h.pool
    room_mb, reserved_mb = 100, 0  # no sandbox: nothing reserved with the scheduler
    used = int(registry.used_capacity()["disk_mb"])
    assert advertised_disk_mb(100_000, used, room_mb) - reserved_mb == room_mb
    await h.pool.close()
