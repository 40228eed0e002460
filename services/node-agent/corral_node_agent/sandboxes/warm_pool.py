"""Sandboxes started before anyone asks for them, so that a create only claims one.

Most of a create's time on a node is ``crun run`` and the bundle around it (~30 of ~55 ms
serial, docs/benchmarks.md "Create fast path"); a sandbox already started with the same spec
turns that into a rename (``SandboxBackend.claim``). Kubernetes agent-sandbox's warm pools do
the same with pods.

What is pooled: container sandboxes of an environment with network "none", without a
snapshot or a disk image. Their *shape* is every field of the spec that reaches the container
when it starts (tenant, environment, limits, env, run_as) and the layers it is mounted from
(the digests of the create's pinned image, ``SandboxRecord.image``); not its lifetime, labels
or workdir, which the claim sets. A shape is filled on the very layers pinned by the create
that asked for it, so the pool resolves no name, and a create whose environment was re-pointed
since (another pin) is another shape: the scheduler, which computes the same key from the
record's pin, does not count the old shape's containers for it.

How many of a shape are kept ready follows its demand (``_Shape.target``): the creates that
asked for it in the last ``DEMAND_WINDOW_S``, less one, at most ``max_size``, and never fewer
than ``size`` (an operator's fixed floor, 0 by default). A shape asked for once (a one-off
sandbox) gets none; a stream or a burst grows its pool up to ``max_size``; ``idle_s`` after the
last create of a shape it is drained to zero. At most ``MAX_SHAPES`` shapes are kept (the least
recently asked for goes first).

What the pool holds is bounded three ways: at most ``max(max_size, size x MAX_SHAPES)`` pooled
sandboxes on the node, all shapes together (each an idle init: ~1.6 MiB of host memory, its pids); a slot
of the node's max_sandboxes each (``room``); and their requests together with the node's
sandboxes' within the node's capacity (``fits``). None of it is reserved with the scheduler,
which counts it free: the pool fills only what no sandbox reserved, and gives it back
(``make_room``) as soon as a create placed on it needs it, so nothing is counted twice.

Refills start one sandbox at a time, only while no create is being started on the node
(``quiet``), and, while a shape still has sandboxes ready, only once no create has asked for it
for ``REFILL_SETTLE_S``: a burst takes what is ready (and starts the rest itself), the pool fills
again once it is over, so the pool does not compete with the creates it is there to speed up.
A shape with none ready is refilled in any gap, as a steady stream of creates needs.

A claimed sandbox is one started for nobody else: each one has its own disk, user namespace
ids and cgroup, is handed to one create only, and at the claim takes the create's id (also
its hostname), spec, lifetime and owner record; it was started with the create's env, limits
and user. It keeps the crun id it was started under (``runtime_id``, also its cgroup's and
directory's name). Its layers were acquired when it was started; the claim checks that they
are the ones the create starts on (its pin).

Each pooled sandbox has a record on the node's disk (``records``: tenant, template spec,
layers; owners.py's format, in a directory of its own, so that nothing registers it as a
sandbox), so an agent restarted after a crash puts the ones still running back in the pool
(``adopt``) and a burst across the restart is still served from it. An agent that stops
(``close``) stops its pool: what it leaves for the next run is sandboxes only.
"""

import asyncio
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral_common.contracts.images import EnvironmentLayer
from corral_common.contracts.sandboxes import SandboxSpec, warm_pool_shape
from corral_common.logging import get_logger
from corral_node_agent.backends.base import SandboxBackend
from corral_node_agent.backends.types import RootFs
from corral_node_agent.errors import NodeAgentError
from corral_node_agent.sandboxes.owners import OwnerRecord, OwnerRecords

log = get_logger(__name__)

MAX_SHAPES = 4
# A pooled sandbox outlives any create's lifetime: the pool's idle rule, not timeout_s, ends it.
AHEAD_TIMEOUT_S = 7 * 24 * 3600
# After a failed start ahead, the shape is not retried for this long (the create path says why).
RETRY_AFTER_S = 30.0
# A burst's creates reach a node tens of ms apart (each waits on the control plane in between):
# a refill in those gaps took crun's and the bundle's cpu from the claims, ~35% of a burst's
# creations/s on 2 cores (docs/benchmarks.md "Warm pool"). A shape with sandboxes ready is
# refilled once it has not been asked for this long.
REFILL_SETTLE_S = 0.5
# The window a shape's demand is counted over (see the module's docstring).
DEMAND_WINDOW_S = 60.0


@dataclass
class Ahead:
    """One sandbox started ahead: its runtime id and what was acquired for it (the manager's
    entry, whose layers move to the create that claims it)."""

    runtime_id: str
    entry: Any  # sandboxes.service._Entry


def _shape_key(spec: SandboxSpec, tenant: str, layers: Sequence[EnvironmentLayer] | None) -> str | None:
    """warm_pool_shape with the layers' digests (the scheduler computes it from the record's pin)."""
    return warm_pool_shape(spec, tenant, None if layers is None else [layer.digest for layer in layers])


@dataclass
class _Shape:
    spec: SandboxSpec  # the template it is started with
    tenant: str
    # The pinned layers it is started on.
    layers: tuple[EnvironmentLayer, ...] | None
    asked_at: float
    ready: deque[Ahead] = field(default_factory=deque)
    starting: int = 0
    failed_at: float = -RETRY_AFTER_S
    asks: deque[float] = field(default_factory=deque)  # when creates asked for it (at most cap + 1 kept)

    def asked(self, now: float, cap: int) -> None:
        self.asked_at = now
        self.asks.append(now)
        while self.asks and (now - self.asks[0] > DEMAND_WINDOW_S or len(self.asks) > cap + 1):
            self.asks.popleft()

    def target(self, now: float, floor: int, cap: int) -> int:
        """How many of it to keep ready: its creates in the last DEMAND_WINDOW_S less one, at
        most ``cap``, at least ``floor``."""
        recent = sum(1 for t in self.asks if now - t <= DEMAND_WINDOW_S)
        return max(floor, min(cap, recent - 1))


class WarmPool:
    def __init__(self, backend: SandboxBackend, *, size: int, idle_s: float, max_size: int = 0,
                 new_entry: Callable[[SandboxSpec, str, tuple[EnvironmentLayer, ...] | None], Any],
                 acquire: Callable[[Any], Awaitable[RootFs]], release: Callable[[Any], Awaitable[None]],
                 quiet: Callable[[], Awaitable[None]], room: Callable[[], int] = lambda: 1 << 30,
                 fits: Callable[[SandboxSpec], bool] = lambda spec: True,
                 records: OwnerRecords | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        # ``room``: how many more sandboxes, pooled ones included, the node may run (its
        # max_sandboxes less what it runs): a pooled sandbox never takes a create's place.
        # ``fits``: whether one more of a spec's requests fits the node's capacity beside its
        # sandboxes' and the pool's (``held()``).
        self.backend, self.size, self.idle_s, self.clock, self._room = backend, size, idle_s, clock, room
        self._fits = fits
        self.max_size = max_size  # what demand may grow a shape to (size: what it always gets)
        # Pooled sandboxes on the node at most, every shape together (each shape's floor kept).
        self.limit = max(max_size, size * MAX_SHAPES)
        self._new_entry, self._acquire, self._release, self._quiet = new_entry, acquire, release, quiet
        self.records = records  # None: a restarted agent deletes the pooled sandboxes
        self._shapes: OrderedDict[str, _Shape] = OrderedDict()
        self._by_runtime: dict[str, str] = {}  # runtime id -> shape, for every pooled sandbox
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        # The start ahead in flight: close() lets it finish (then stops it) rather than cancel
        # it halfway, which would leave a container nobody knows of.
        self._start: asyncio.Task | None = None
        self.hits = self.misses = 0

    # ---- the create path ------------------------------------------------------------------

    def take(self, spec: SandboxSpec, tenant: str, layers: tuple[EnvironmentLayer, ...] | None = None) -> Ahead | None:
        """A ready sandbox of this create's shape (``layers``: its pinned ones; None: none
        ready, the pool fills it later)."""
        key = _shape_key(spec, tenant, layers)
        if key is None:
            return None
        shape = self._shape(key, spec, tenant, layers)
        shape.asked(self.clock(), max(self.size, self.max_size))
        self._shapes.move_to_end(key)
        ahead = shape.ready.popleft() if shape.ready else None
        if ahead is not None:
            self.hits += 1  # still owned (an end meanwhile is not reported) until claimed() or discard()
        else:
            self.misses += 1
        self._wake_up()
        return ahead

    def _shape(self, key: str, spec: SandboxSpec, tenant: str, layers: tuple[EnvironmentLayer, ...] | None) -> _Shape:
        shape = self._shapes.get(key)
        if shape is None:
            # (WARM_POOL_CLAIM_FIELDS: what the claim sets)
            template = spec.model_copy(update={"timeout_s": AHEAD_TIMEOUT_S, "labels": {}, "workdir": None})
            shape = self._shapes[key] = _Shape(spec=template, tenant=tenant, layers=layers, asked_at=self.clock())
        return shape

    def has_ready(self, spec: SandboxSpec, tenant: str, layers: tuple[EnvironmentLayer, ...] | None = None) -> bool:
        key = _shape_key(spec, tenant, layers)
        return key is not None and key in self._shapes and bool(self._shapes[key].ready)

    def owns(self, runtime_id: str) -> bool:
        """Whether ``runtime_id`` is a pooled sandbox nobody has claimed (ready, or taken and
        being claimed)."""
        return runtime_id in self._by_runtime

    def claimed(self, ahead: Ahead) -> None:
        """The create that took ``ahead`` made it its sandbox: no longer the pool's."""
        self._forget(ahead.runtime_id)

    def _forget(self, runtime_id: str) -> str | None:
        if self.records is not None:
            self.records.remove(runtime_id)
        return self._by_runtime.pop(runtime_id, None)

    async def ended(self, runtime_id: str) -> None:
        """A pooled sandbox ended on its own (the backend tore it down): forget it."""
        key = self._forget(runtime_id)
        shape = self._shapes.get(key) if key else None
        if shape is None:
            return
        for ahead in list(shape.ready):
            if ahead.runtime_id == runtime_id:
                shape.ready.remove(ahead)
                await self._release(ahead.entry)
        self._wake_up()

    async def discard(self, ahead: Ahead) -> None:
        """Stop a sandbox taken from the pool that will not be claimed after all."""
        self._forget(ahead.runtime_id)
        try:
            await self.backend.stop(ahead.runtime_id)
        finally:
            await self._release(ahead.entry)

    def shapes(self) -> list[_Shape]:
        return list(self._shapes.values())

    def ready_count(self) -> int:
        return sum(len(s.ready) for s in self._shapes.values())

    def count(self) -> int:
        """Pooled sandboxes, ready or being started (each holds a node's sandbox slot)."""
        return sum(len(s.ready) + s.starting for s in self._shapes.values())

    async def make_room(self) -> bool:
        """Stop one ready sandbox, of the least recently asked for shape, so that a create the
        pool cannot serve fits the node (False: none ready to give up)."""
        for shape in self._shapes.values():  # least recently asked for first
            if shape.ready:
                ahead = shape.ready.pop()
                log.info("warm_pool.evicted", runtime_id=ahead.runtime_id)
                await self.discard(ahead)
                return True
        return False

    def ready_by_shape(self) -> dict[str, int]:
        """What the node advertises in its heartbeat, for the scheduler (warm_pool_shape)."""
        return {key: len(s.ready) for key, s in self._shapes.items() if s.ready}

    def held(self) -> tuple[float, int, int]:
        """The cpu, memory_mb and pids the pooled sandboxes request, ready or being started
        (``fits`` counts them beside the node's sandboxes'; the scheduler does not)."""
        cpu, memory_mb, pids = 0.0, 0, 0
        for shape in self._shapes.values():
            n, r = len(shape.ready) + shape.starting, shape.spec.reservation
            cpu, memory_mb, pids = cpu + n * r.cpu, memory_mb + n * r.memory_mb, pids + n * r.pids
        return cpu, memory_mb, pids

    # ---- filling ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    def _wake_up(self) -> None:
        self._wake.set()

    def slot_freed(self) -> None:
        """A sandbox of the node ended: a fill held back for want of room may go on now."""
        self._wake_up()

    def _wanted(self) -> str | None:
        """The shape that should get one more sandbox now (None: all filled)."""
        if self._room() <= 0 or self.count() >= self.limit:
            return None
        now = self.clock()
        for key, shape in self._shapes.items():
            if now - shape.asked_at < self.idle_s and now - shape.failed_at >= RETRY_AFTER_S \
                    and len(shape.ready) + shape.starting < shape.target(now, self.size, self.max_size) \
                    and not self._settling(shape, now) and self._fits(shape.spec):
                return key
        return None

    async def _expire(self) -> None:
        now = self.clock()
        while len(self._shapes) > MAX_SHAPES:
            _, shape = self._shapes.popitem(last=False)
            await self._drain(shape)
        for key in [k for k, s in self._shapes.items() if now - s.asked_at >= self.idle_s and not s.starting]:
            await self._drain(self._shapes.pop(key))

    async def _drain(self, shape: _Shape) -> None:
        while shape.ready:
            ahead = shape.ready.popleft()
            try:
                await self.discard(ahead)
            except Exception:
                log.exception("warm_pool.discard_failed", runtime_id=ahead.runtime_id)

    def _settling(self, shape: _Shape, now: float) -> float:
        """How much longer a burst may still be taking from ``shape`` (0: fill it now)."""
        return max(0.0, shape.asked_at + REFILL_SETTLE_S - now) if shape.ready else 0.0

    async def _run(self) -> None:
        while True:
            wait_s = max(1.0, min(60.0, self.idle_s / 2))
            now = self.clock()
            if settling := [t for s in self._shapes.values() if (t := self._settling(s, now)) > 0]:
                wait_s = min(wait_s, min(settling))
            try:
                # (not wait_for: on 3.11 it can swallow a cancel that meets a set event)
                async with asyncio.timeout(wait_s):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            await self._expire()
            while (key := self._wanted()) is not None:
                await self._quiet()
                if key in self._shapes:
                    self._start = asyncio.ensure_future(self._start_one(key, self._shapes[key]))
                    await asyncio.shield(self._start)

    async def _start_one(self, key: str, shape: _Shape) -> None:
        runtime_id = f"wp-{secrets.token_hex(8)}"
        entry = self._new_entry(shape.spec, shape.tenant, shape.layers)
        shape.starting += 1
        started = False
        try:
            rootfs = await self._acquire(entry)
            await self.backend.start_ahead(runtime_id, shape.spec, rootfs)
            started = True
        except (NodeAgentError, OSError) as exc:
            shape.failed_at = self.clock()
            log.warning("warm_pool.start_failed", runtime_id=runtime_id, error=str(exc))
        finally:
            shape.starting -= 1
            if not started:
                await self._release(entry)
        if not started:
            return
        if self._shapes.get(key) is not shape:  # drained meanwhile
            await self.discard(Ahead(runtime_id, entry))
            return
        if self.records is not None:
            now = time.time()
            self.records.write(OwnerRecord(sandbox_id=runtime_id, tenant=shape.tenant, spec=shape.spec,
                                           created_at=now, started_at=now, layers=tuple(entry.layers)))
        shape.ready.append(Ahead(runtime_id, entry))
        self._by_runtime[runtime_id] = key
        log.info("warm_pool.ready", runtime_id=runtime_id, ready=len(shape.ready))

    def adopt(self, runtime_id: str, record: OwnerRecord, entry: Any) -> bool:
        """Take back a sandbox a previous agent run started ahead (``record``: what it wrote
        for it; ``entry`` holds its layers again). False: not poolable now (the caller stops
        it): its shape is no longer one, or the pool holds its size of that shape already.
        Its shape is that of creates pinned to the layers it runs on."""
        key = _shape_key(record.spec, record.tenant, record.layers)
        if key is None:
            return False
        shape = self._shape(key, record.spec, record.tenant, record.layers)
        if len(shape.ready) >= max(self.size, self.max_size) or self.count() >= self.limit:
            return False
        shape.ready.append(Ahead(runtime_id, entry))
        self._by_runtime[runtime_id] = key
        return True

    async def close(self) -> None:
        """Stop filling and stop every pooled sandbox, the one being started too (agent
        shutdown: pooled sandboxes are not kept for the next agent run)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._start is not None:
            await asyncio.gather(self._start, return_exceptions=True)  # then drained with the rest
            self._start = None
        for shape in list(self._shapes.values()):
            await self._drain(shape)
        self._shapes.clear()
