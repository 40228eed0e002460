"""Consumes ``sandbox.requested``, reserves room on a node and hands the sandbox to it.

A request that finds no room is held (its message stays unacked) and retried until
capacity frees up, so a burst queues instead of failing; if no live node could ever hold
it, it fails as ``unschedulable``.
"""

import asyncio
import time

from corral_common import lifecycle
from corral_common.amqp import EventBus
from corral_common.contracts.events import SandboxPlace, SandboxRequested, node_routing_key
from corral_common.contracts.sandboxes import TERMINAL_STATES, FailureReason, SandboxState, warm_pool_shape
from corral_common.logging import get_logger
from corral_common.store.state import StateStore
from corral_common.store.state_records import SandboxRecord
from corral_scheduler import metrics
from corral_scheduler.placement.locality import EnvironmentLayers
from corral_scheduler.placement.outcomes import PlaceOutcome, settled_outcome
from corral_scheduler.placement.policy import (
    by_locality,
    by_warm_pool,
    could_ever_fit,
    never_fits_reason,
    rank_nodes,
    waiting_reason,
)
from corral_scheduler.settings import SchedulerSettings

log = get_logger(__name__)


class Placer:
    def __init__(self, store: StateStore, bus: EventBus, settings: SchedulerSettings,
                 environments: EnvironmentLayers | None = None):
        self.store = store
        # Image locality (None: placement by load alone); it asks image-service only for the
        # layers of records without a pinned image.
        self.environments = environments
        self.bus = bus
        self.settings = settings
        # Requests held (their messages unacked) until a node has room for them.
        self.waiting = 0

    async def handle(self, event: SandboxRequested) -> None:
        if await self.try_place(event.sandbox_id, event.node_id):
            return
        self.waiting += 1
        try:
            while not await self.try_place(event.sandbox_id, event.node_id):  # noqa: ASYNC110 - room frees in Redis; nothing here to wait on
                await asyncio.sleep(self.settings.placement_retry_s)
        finally:
            self.waiting -= 1

    async def try_place(self, sandbox_id: str, node_id: str | None = None) -> PlaceOutcome:
        """One placement attempt (false only for ``no_room``: the request needs more work).
        Tenant and spec come from the record (``node_id``: only that node may take it, as may
        the record's own required node)."""
        started = time.perf_counter()
        timeout = self.settings.heartbeat_timeout_s
        record, held, nodes = await self.store.placement_view(sandbox_id, timeout)
        if record is None or record.state in TERMINAL_STATES:
            return settled_outcome(record)
        if record.delete_requested and record.state is SandboxState.pending:
            if await lifecycle.transition(self.store, self.bus, sandbox_id, SandboxState.terminated, reason="deleted"):
                return PlaceOutcome.dropped
            return settled_outcome(await self.store.get_sandbox(sandbox_id))
        if record.state is not SandboxState.pending:
            # Re-delivered after we already placed it: hand it to the same node again (the
            # node-agent ignores a sandbox it already has).
            if record.node_id and record.state is SandboxState.scheduled:
                await self._publish_place(record, record.node_id)
            return PlaceOutcome.already_placed

        spec = record.spec
        required = node_id or record.required_node
        if required:
            nodes = [n for n in nodes if n.node_id == required]
            if not nodes:
                await lifecycle.transition(self.store, self.bus, sandbox_id, SandboxState.failed,
                                           reason=FailureReason.required_node_unavailable.value,
                                           error=f"node {required} (the only one that may take it) is not live")
                metrics.failed(FailureReason.required_node_unavailable.value, spec.backend,
                               time.perf_counter() - started)
                return PlaceOutcome.failed
        # A node live by its liveness pulse alone (its full heartbeat older than the timeout: its
        # agent's loop is busy) takes nothing new until it catches up; reserve would refuse it.
        now = time.time()
        busy = {n.node_id for n in nodes if now - n.heartbeat_at > timeout}
        ranked = [n for n in nodes if n.node_id == held] if held else rank_nodes(
            [n for n in nodes if n.node_id not in busy], spec, self.settings.placement_strategy,
            self.settings.placement_measured_memory_reserve_mb)
        if not held and len(ranked) > 1:
            layers = await self._layers(record)
            if layers and self.environments is not None:  # (None: locality off)
                ranked = await self._by_locality(ranked, layers)
            # (the node keys its pool by every layer, in mount order: a digest may repeat)
            digests = record.image.digests if record.image is not None else list(layers) if layers else None
            ranked = by_warm_pool(ranked, warm_pool_shape(spec, record.tenant, digests),
                                  self.settings.placement_locality_slack)
        for node in ranked:
            got = await self.store.reserve(node.node_id, sandbox_id, spec, timeout,
                                           memory_mb=node.reserved_memory_mb(spec))
            if got is None:
                continue
            # A waiting reason (see below) goes with the wait.
            if not await lifecycle.transition(self.store, self.bus, sandbox_id, SandboxState.scheduled, node_id=got,
                                              reason="" if record.reason else None):
                return await self._refused(sandbox_id)
            await self._publish_place(record, got)
            metrics.placed(record.created_at, "job" if record.job_id else "request", spec.backend,
                           time.perf_counter() - started)
            return PlaceOutcome.placed
        if nodes and not any(could_ever_fit(n, spec) for n in nodes):
            await lifecycle.transition(self.store, self.bus, sandbox_id, SandboxState.failed,
                                       reason=FailureReason.unschedulable.value, error=never_fits_reason(nodes, spec))
            metrics.failed(FailureReason.unschedulable.value, spec.backend, time.perf_counter() - started)
            return PlaceOutcome.failed
        # It queues (never dropped): its record says why, once per change of reason.
        reason = waiting_reason(nodes, spec, busy)
        if reason != record.reason:
            await self.store.set_waiting_reason(sandbox_id, reason)
        return PlaceOutcome.no_room

    async def _layers(self, record: SandboxRecord) -> dict[str, int] | None:
        """digest -> size of the layers it starts on, base first (None: unknown). The api's pin:
        no question to image-service."""
        if record.image is not None:
            return {layer.digest: layer.size for layer in record.image.layers}
        # compat(d03aa3f, 2026-12-07): records without a pin (written before the api pinned images, restored
        # snapshots, jobs queued again from SQL after Redis lost them); can go once snapshot
        # and job rows keep their pin.
        if self.environments is None:
            return None
        return await self.environments.sizes(record.tenant, record.spec) or None

    async def _by_locality(self, ranked: list, layers: dict[str, int]) -> list:
        if sum(layers.values()) < max(1, self.settings.placement_locality_min_mb * 1024 * 1024):
            return ranked
        held = await self.store.held_layers([n.node_id for n in ranked], list(layers))
        return by_locality(ranked, layers, held, self.settings.placement_locality_slack)

    async def _refused(self, sandbox_id: str) -> PlaceOutcome:
        """The sandbox left pending while we held its reservation. Deleted meanwhile: give the
        room back (its terminal transition may have run before we reserved). Placed by another
        scheduler (two admitters on one job head, a redelivery racing the first delivery):
        reserve() is idempotent per sandbox, so that scheduler placed it with this very
        reservation, which must stay."""
        record = await self.store.get_sandbox(sandbox_id)
        if record is None or record.state in TERMINAL_STATES:
            await self.store.release(sandbox_id)
        return settled_outcome(record)

    async def _publish_place(self, record: SandboxRecord, node_id: str) -> None:
        await self.bus.publish(node_routing_key(node_id, "place"), SandboxPlace(
            sandbox_id=record.id, tenant=record.tenant, node_id=node_id, spec=record.spec,
        ))
