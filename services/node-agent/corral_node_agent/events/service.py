"""The node-agent's control path: place/stop commands from the bus, exits, heartbeats.

Every handler is idempotent: RabbitMQ delivers at least once, so a re-delivered place
finds the sandbox already there (or already ended) and does nothing new.
"""

import asyncio
import time
from collections import defaultdict

from corral_common import lifecycle
from corral_common.amqp import EventBus
from corral_common.contracts.events import SandboxPlace, SandboxStop
from corral_common.contracts.sandboxes import TERMINAL_STATES, FailureReason, SandboxState, Usage
from corral_common.logging import get_logger
from corral_common.node_liveness import WEDGE_TIMEOUTS
from corral_common.store.state import StateStore
from corral_node_agent import metrics
from corral_node_agent.backends.base import ExitReason
from corral_node_agent.capacity import disk
from corral_node_agent.capacity.memory_guard import MemoryGuard
from corral_node_agent.capacity.resources import NodeCapacity
from corral_node_agent.errors import NotFound, SandboxNotRunning, StartFailed
from corral_node_agent.events.pulse import LoopWatch
from corral_node_agent.events.registration import NodeRegistration
from corral_node_agent.network.egress import node_egress
from corral_node_agent.network.reporting import DenialReporter
from corral_node_agent.sandboxes.owners import OwnerRecord
from corral_node_agent.sandboxes.service import SandboxManager
from corral_node_agent.settings import NodeAgentSettings

log = get_logger(__name__)


class NodeEvents:
    def __init__(self, settings: NodeAgentSettings, store: StateStore, bus: EventBus, manager: SandboxManager,
                 capacity: NodeCapacity):
        self.settings = settings
        self.capacity = capacity  # what the heartbeat advertises (capacity.claim)
        self._disk_reserve_mb = settings.disk_free_reserve_mb  # the watermark (unset: derived at the first beat)
        self.node_id = settings.node_id
        self.store = store
        self.bus = bus
        self.manager = manager
        # The node's last resort under host memory pressure (capacity/memory_guard.py), set at start.
        self.memory_guard: MemoryGuard | None = None
        # One lifecycle operation per sandbox at a time: a stop that arrives while the
        # sandbox is still starting waits for the start to finish, then undoes it.
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        # Registers again what runs here when Redis lost it (checked before every heartbeat).
        self.registration = NodeRegistration(self.node_id, store, manager, self._locks)
        # Whether the loop and the full beat make progress: the liveness pulse (pulse.py) reads it.
        self.liveness = LoopWatch(settings.heartbeat_interval_s, WEDGE_TIMEOUTS * settings.heartbeat_timeout_s)
        manager.on_exit(self.on_exit)
        # Egress refusals go out as sandbox.network.denied events (network/reporting.py).
        self.denials = DenialReporter(bus, self.node_id)
        node_egress(settings).on_denied = self.denials.add

    async def _transition(self, sandbox_id: str, target: SandboxState, **kwargs) -> bool:
        return await lifecycle.transition(self.store, self.bus, sandbox_id, target, node_id=self.node_id, **kwargs)

    async def on_place(self, event: SandboxPlace) -> None:
        sandbox_id = event.sandbox_id
        async with self._locks[sandbox_id]:
            try:
                await self._place(event)
            finally:
                if not self._locks[sandbox_id].locked():
                    self._locks.pop(sandbox_id, None)

    async def _place(self, event: SandboxPlace) -> None:
        sandbox_id = event.sandbox_id
        record = await self.store.get_sandbox(sandbox_id)
        if record is None or record.state in TERMINAL_STATES or record.node_id != self.node_id:
            return
        if sandbox_id in self.manager.ids():
            return
        if record.delete_requested:
            await self._transition(sandbox_id, SandboxState.terminated, reason="deleted")
            return
        if record.state is SandboxState.scheduled:
            await self._transition(sandbox_id, SandboxState.starting)
        elif record.state is not SandboxState.starting:
            # running/stopping without being in our manager: a previous agent run owned it.
            await self._transition(sandbox_id, SandboxState.failed, reason=FailureReason.node_lost.value)
            return
        started, outcome = time.perf_counter(), "failed"
        try:
            # Who owns it is kept on this node's disk too, for a Redis that loses its data.
            # On the layers the api pinned (record.image; None: a record without a pin).
            await self.manager.create(sandbox_id, event.spec, owner=OwnerRecord.of(record, event.spec, time.time()),
                                      image=record.image)
            outcome = "started"
        except StartFailed as exc:
            log.warning("sandbox.start_failed", sandbox_id=sandbox_id, reason=exc.reason.value, error=exc.message)
            await self._transition(sandbox_id, SandboxState.failed, reason=exc.reason.value, error=exc.message[:500])
            return
        except Exception as exc:
            log.exception("sandbox.start_failed", sandbox_id=sandbox_id)
            await self._transition(sandbox_id, SandboxState.failed, reason=FailureReason.start_failed.value,
                                   error=str(exc)[:500])
            return
        finally:
            metrics.CREATE_SECONDS.labels(node=self.node_id, backend=event.spec.backend, outcome=outcome).observe(
                time.perf_counter() - started)
        # The record says how it runs (kind, accelerator, image transport...).
        if await self._transition(sandbox_id, SandboxState.running, runtime=self.manager.runtime(sandbox_id)):
            metrics.TIME_TO_RUNNING.labels(backend=event.spec.backend).observe(max(0.0, time.time() - record.created_at))
        else:
            if await self.store.get_sandbox(sandbox_id) is None:
                await self.registration.restore(sandbox_id)  # Redis lost it meanwhile: it runs here
                return
            # Deleted (or failed) while starting: do not leave it running.
            usage = await self.manager.delete(sandbox_id)
            await self._transition(sandbox_id, SandboxState.terminated, reason="deleted", usage=usage)

    async def on_stop(self, event: SandboxStop) -> None:
        sandbox_id = event.sandbox_id
        async with self._locks[sandbox_id]:
            record = await self.store.get_sandbox(sandbox_id)
            if record is None and self.manager.is_live(sandbox_id):
                # Redis lost it (asked to stop before that): register it, then stop it as asked.
                await self.registration.restore(sandbox_id)
                record = await self.store.get_sandbox(sandbox_id)
            if record is None or record.state in TERMINAL_STATES:
                return
            if record.state in (SandboxState.scheduled, SandboxState.pending):
                # Never started here: the place command will find it terminated and skip it.
                await self._transition(sandbox_id, SandboxState.terminated, reason=event.reason)
                return
            await self._transition(sandbox_id, SandboxState.stopping, reason=event.reason)
            started = time.perf_counter()
            usage = await self.manager.delete(sandbox_id)
            metrics.STOP_SECONDS.labels(node=self.node_id, backend=record.spec.backend).observe(
                time.perf_counter() - started)
            await self._transition(sandbox_id, SandboxState.terminated, reason=event.reason, usage=usage)

    async def pause(self, sandbox_id: str) -> SandboxState:
        """Freeze a running sandbox (running → paused); a paused one stays paused."""
        async with self._locks[sandbox_id]:
            record = await self._local_record(sandbox_id)
            if record.state is SandboxState.paused:
                await self.manager.pause(sandbox_id)  # idempotent: makes sure it is frozen
                return record.state
            if record.state is not SandboxState.running:
                raise SandboxNotRunning(f"sandbox {sandbox_id} is {record.state.value}", loc=["path", "sandbox_id"])
            await self.manager.pause(sandbox_id)
            if not await self._transition(sandbox_id, SandboxState.paused):
                await self.manager.resume(sandbox_id)  # stopped or failed meanwhile: undo
                record = await self._local_record(sandbox_id)
                raise SandboxNotRunning(f"sandbox {sandbox_id} is {record.state.value}", loc=["path", "sandbox_id"])
            return SandboxState.paused

    async def resume(self, sandbox_id: str) -> SandboxState:
        """Thaw a paused sandbox (paused → running); a running one stays running."""
        async with self._locks[sandbox_id]:
            record = await self._local_record(sandbox_id)
            if record.state not in (SandboxState.paused, SandboxState.running):
                raise SandboxNotRunning(f"sandbox {sandbox_id} is {record.state.value}", loc=["path", "sandbox_id"])
            await self.manager.resume(sandbox_id)
            if record.state is SandboxState.paused:
                await self._transition(sandbox_id, SandboxState.running)
            return SandboxState.running

    async def _local_record(self, sandbox_id: str):
        record = await self.store.get_sandbox(sandbox_id)
        if record is None or record.node_id != self.node_id or sandbox_id not in self.manager.ids():
            raise NotFound(f"sandbox {sandbox_id} not found on this node", loc=["path", "sandbox_id"])
        return record

    async def on_exit(self, sandbox_id: str, reason: ExitReason, usage: Usage) -> None:
        """A sandbox ended on its own: its timeout elapsed, or its init process died."""
        if await self._end_on_own(sandbox_id, reason, usage) or await self.store.get_sandbox(sandbox_id):
            return
        # Redis lost its record before this node registered it again: register it from the
        # owner record, then end it as usual (so its end reaches the history, and a job
        # queued again does not run it twice).
        if await self.registration.restore(sandbox_id, live=False) is not None:
            await self._end_on_own(sandbox_id, reason, usage)

    async def _end_on_own(self, sandbox_id: str, reason: ExitReason, usage: Usage) -> bool:
        if reason is ExitReason.timeout:
            await self._transition(sandbox_id, SandboxState.stopping, reason="timeout")
            return await self._transition(sandbox_id, SandboxState.terminated, reason="timeout", usage=usage)
        return await self._transition(sandbox_id, SandboxState.failed, reason=reason.value, usage=usage)

    async def reconcile(self) -> None:
        """At start, after the manager adopted what still runs: align the records with it.
        Adopted sandboxes that should not run any more are stopped; records of sandboxes
        on this node whose processes died with the previous run are marked failed."""
        adopted = set(self.manager.ids())
        for sandbox_id in adopted:
            async with self._locks[sandbox_id]:
                try:
                    await self._reconcile_adopted(sandbox_id)
                except Exception:
                    log.exception("sandbox.reconcile_failed", sandbox_id=sandbox_id)
        for sandbox_id in await self.store.node_sandboxes(self.node_id):
            if sandbox_id in adopted:
                continue
            record = await self.store.get_sandbox(sandbox_id)
            if record is None or record.node_id != self.node_id:
                continue
            # scheduled/starting ones are left to their place command, which the broker
            # re-delivers (it is only acked once the start finished).
            if record.state in (SandboxState.running, SandboxState.paused):
                log.warning("sandbox.lost_on_restart", sandbox_id=sandbox_id)
                await self._transition(sandbox_id, SandboxState.failed, reason=FailureReason.lost_on_restart.value)
            elif record.state is SandboxState.stopping:
                await self._transition(sandbox_id, SandboxState.terminated, reason=record.reason or "deleted")

    async def _reconcile_adopted(self, sandbox_id: str) -> None:
        record = await self.store.get_sandbox(sandbox_id)
        if record is None:
            # Redis lost it while this agent was away (the heartbeat before this registers
            # such sandboxes; this one went missing since): register it, or stop an orphan.
            await self.registration.restore(sandbox_id)
            return
        if record.node_id != self.node_id or record.state in TERMINAL_STATES:
            await self.manager.delete(sandbox_id)
            return
        if record.delete_requested or record.state is SandboxState.stopping:
            reason = record.reason if record.state is SandboxState.stopping and record.reason else "deleted"
            await self._transition(sandbox_id, SandboxState.stopping, reason=reason)
            usage = await self.manager.delete(sandbox_id)
            await self._transition(sandbox_id, SandboxState.terminated, reason=reason, usage=usage)
            return
        if record.state is SandboxState.scheduled:
            await self._transition(sandbox_id, SandboxState.starting)
            record.state = SandboxState.starting
        if record.state is SandboxState.starting:
            # The previous run died between `crun run` and reporting it.
            if self.manager.is_paused(sandbox_id):
                await self.manager.resume(sandbox_id)
            await self._transition(sandbox_id, SandboxState.running, runtime=self.manager.runtime(sandbox_id))
        elif record.state is SandboxState.running and self.manager.is_paused(sandbox_id):
            await self.manager.resume(sandbox_id)  # died between pause and recording it
        elif record.state is SandboxState.paused and not self.manager.is_paused(sandbox_id):
            await self.manager.pause(sandbox_id)  # died between resume and recording it
        owners = self.manager.owners
        if owners is not None and owners.get(sandbox_id) is None:  # started by an agent that kept none
            owners.write(OwnerRecord.of(record, self.manager.spec(sandbox_id), time.time()))
        log.info("sandbox.readopted", sandbox_id=sandbox_id, state=record.state.value)

    async def heartbeat_once(self) -> None:
        await self._beat()
        await self._report_layers()

    async def _beat(self) -> None:
        # What runs here is in Redis before the node shows up live there (after a Redis that
        # lost its data, the scheduler must not see this node empty), and a node given up by
        # the reaper stops what it still runs before its heartbeat clears the tombstone.
        await self.registration.sync()
        s, cap = self.settings, self.capacity
        # An explicit max_sandboxes is in cap too; read from the settings, a change to them shows.
        await self.store.heartbeat(self.node_id, s.url, cap.cpu, cap.memory_mb, s.max_sandboxes or cap.max_sandboxes,
                                   backends=self.manager.kinds(), accelerator=self.manager.accelerator(),
                                   vm_memory_overhead_mb=self.manager.vm_memory_overhead_mb, pids=cap.pids,
                                   disk_mb=await self._disk_mb(),
                                   # While the memory guard holds the node's limit down, that is its claim.
                                   memory=_measured_memory(self.manager, self.memory_guard.limit_mb
                                                           if self.memory_guard is not None else cap.claim.memory_mb),
                                   warm=self.manager.pool.ready_by_shape() if self.manager.pool is not None else None)
        gap = self.liveness.beat()
        if gap > s.heartbeat_timeout_s / 2:
            # Without the liveness pulse a beat this late (past the timeout) lost the node.
            log.warning("node.heartbeat_late", node_id=self.node_id, since_previous_s=round(gap, 1),
                        loop_lag_s=round(self.liveness.lag_s(), 1), heartbeat_timeout_s=s.heartbeat_timeout_s)

    async def _disk_mb(self) -> int:
        """The disk the node advertises: its capacity, cut to what is left above the watermark."""
        s = self.settings
        if self._disk_reserve_mb is None:
            self._disk_reserve_mb = await asyncio.to_thread(disk.default_free_reserve_mb, s.state_dir)
        room = await asyncio.to_thread(disk.room_mb, s.state_dir, self._disk_reserve_mb, s.host_share)
        return disk.advertised_disk_mb(s.disk_capacity_mb, int(self.manager.used_capacity()["disk_mb"]), room)

    async def _report_layers(self) -> None:
        """Which layers it holds, for placement by locality (best effort: never fails a heartbeat)."""
        try:
            held = await asyncio.to_thread(self.manager.layers.held_bytes)
            s = self.settings
            await self.store.report_layers(self.node_id, held, ttl_s=max(3 * s.heartbeat_timeout_s, 30))
        except Exception:
            log.exception("node.layers_report_failed", node_id=self.node_id)

    async def heartbeat_forever(self) -> None:
        # The layer report runs beside the beat, never before it: it waits for a worker thread,
        # and a burst of teardowns (each unmounts and deletes a disk in one) can hold every
        # worker for seconds, which would make the beat late and the reaper fail the node.
        report: asyncio.Task | None = None
        try:
            while True:
                try:
                    await self._beat()
                except Exception:
                    log.exception("node.heartbeat_failed", node_id=self.node_id)
                if report is None or report.done():
                    report = asyncio.create_task(self._report_layers())
                await asyncio.sleep(self.settings.heartbeat_interval_s)
        finally:
            if report is not None:
                report.cancel()


def _measured_memory(manager, limit_mb: int) -> dict[str, float] | None:
    """The node's measured memory for its heartbeat (None where nothing is sampled), with
    ``limit_mb``, its physical claim (the node cgroup's limit, before overcommit): the scheduler's
    admission on measured use compares the two."""
    memory = getattr(manager, "memory", None)
    return {**memory.node.summary(), "limit_mb": float(limit_mb)} if memory is not None else None
