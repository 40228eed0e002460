"""Sandbox lifecycle as the api sees it: records in Redis, requests out on the bus."""

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from corral_api import metrics
from corral_api.quotas.service import TenantQuotas
from corral_api.sandboxes.capacity import NodeCeilings
from corral_api.sandboxes.network import NetworkRules
from corral_api.sandboxes.repository import HistoryRepository
from corral_api.sandboxes.restore import SnapshotLookup, restored_spec
from corral_api.sandboxes.waiters import StateWaiters
from corral_common import lifecycle
from corral_common.amqp import EventBus
from corral_common.contracts.events import SANDBOX_REQUESTED_KEY, SandboxRequested, SandboxStop, node_routing_key
from corral_common.contracts.images import (
    Environment,
    EnvironmentCache,
    ImageConfig,
    ImageNotFound,
    ImageServiceClient,
    ImageServiceError,
    ResolvedImage,
)
from corral_common.contracts.network import NetworkPolicy
from corral_common.contracts.sandboxes import TERMINAL_STATES, FailureReason, SandboxSpec, SandboxState
from corral_common.inputs import split_disk_image_ref
from corral_common.logging import get_logger
from corral_common.store.state import StateStore
from corral_common.store.state_nodes import NodeInfo
from corral_common.store.state_records import SandboxRecord
from corral_common.web.errors import Conflict, NotFound, ServiceUnavailable, Unprocessable

log = get_logger(__name__)

# States at or past each waitable one, in lifecycle order; failure ends every wait.
_ORDER = [SandboxState.pending, SandboxState.scheduled, SandboxState.starting, SandboxState.running,
          SandboxState.stopping, SandboxState.terminated]


def reached(state: SandboxState, target: SandboxState) -> bool:
    if state in TERMINAL_STATES or state is SandboxState.paused:
        return state in TERMINAL_STATES or target is not SandboxState.terminated
    return _ORDER.index(state) >= _ORDER.index(target)


T = TypeVar("T")


def with_image_defaults(spec: SandboxSpec, config: dict | None) -> SandboxSpec:
    if not config:
        return spec
    image = ImageConfig.model_validate(config)
    update: dict = {"env": {**image.env, **spec.env}}
    if spec.workdir is None and image.cwd:
        update["workdir"] = image.cwd
    if spec.run_as is None and image.user:
        update["run_as"] = image.user
    return spec.model_copy(update=update)


class EnvironmentCatalog:
    """Asks image-service whether an environment or a disk image exists, so a name it does
    not know is a 422 before anything is made; positive environment answers are cached briefly."""

    def __init__(self, images: ImageServiceClient, ttl_s: float = 30.0):
        self.images = images
        self._cache = EnvironmentCache(images, ttl_s)

    async def require(self, name: str, loc: Sequence[str] = ("body",), tenant: str = "") -> Environment:
        """Environment ``name`` as ``tenant`` sees it (its own, else the shared catalogue's)."""
        return await self._ask(self._cache.get(name, tenant), f"unknown environment {name!r}",
                               [*loc, "environment"], "unknown_environment")

    def forget(self, name: str, tenant: str = "") -> None:
        self._cache.forget(name, tenant)

    async def require_disk_image(self, ref: str, loc: Sequence[str] = ("body",)) -> None:
        await self._ask(self.images.disk_image(*split_disk_image_ref(ref)), f"unknown disk image {ref!r}",
                        [*loc, "disk_image"], "unknown_disk_image")

    async def require_spec(self, spec: SandboxSpec, loc: Sequence[str] = ("body",),
                           tenant: str = "") -> tuple[SandboxSpec, ResolvedImage | None]:
        """Both of a spec's names, where given; returns the spec with its environment's image
        config applied as defaults (image env under the caller's, its cwd and user unless given)
        and the environment as resolved for ``tenant``: the pin its sandboxes are placed by and
        started on (None: no environment)."""
        if spec.disk_image:
            await self.require_disk_image(spec.disk_image, loc)
        if not spec.environment:
            return spec, None
        image = ResolvedImage.of(await self.require(spec.environment, loc, tenant))
        return with_image_defaults(spec, image.config), image

    @staticmethod
    async def _ask(answer: Awaitable[T], unknown: str, loc: list[str], code: str) -> T:
        try:
            return await answer
        except ImageNotFound:
            raise Unprocessable(unknown, loc=loc, code=code) from None
        except ImageServiceError as exc:
            raise ServiceUnavailable(str(exc)) from exc


class SandboxService:
    def __init__(self, store: StateStore, bus: EventBus, history: HistoryRepository, waiters: StateWaiters,
                 environments: EnvironmentCatalog, max_wait_s: float, snapshots: SnapshotLookup | None = None,
                 ceilings: NodeCeilings | None = None, network: NetworkRules | None = None,
                 quotas: TenantQuotas | None = None):
        self.store = store
        # The tenant's quotas, counted before a record exists (None: not counted).
        self.quotas = quotas
        # The egress policy's presets and forbidden targets (None: only the grammar is checked).
        self.network = network
        # What no live node could hold is a 422 before anything is made (None: not checked).
        self.ceilings = ceilings
        self.bus = bus
        self.history = history
        self.waiters = waiters
        self.environments = environments
        self.max_wait_s = max_wait_s
        self.snapshots = snapshots

    async def create(self, tenant: str, spec: SandboxSpec) -> SandboxRecord:
        required_node, restoring = None, bool(spec.from_snapshot)
        if restoring:
            snapshot = await asyncio.to_thread(self.snapshots.get, spec.from_snapshot) if self.snapshots else None
            if snapshot is None or snapshot.tenant != tenant:
                raise NotFound(f"snapshot {spec.from_snapshot} not found", loc=["body", "from_snapshot"],
                               code="snapshot_not_found")
            # The saved state lives on one node's disk, and only fits a machine of its shape.
            explicit = getattr(spec, "requested_fields", spec.model_fields_set)  # SandboxCreate knows
            spec = restored_spec(spec, snapshot.spec, explicit)
            required_node = snapshot.node_id
        if self.ceilings is not None:
            await self.ceilings.require(spec)
        if self.network is not None:
            await self.network.require(spec.network, backend=spec.backend,
                                       guest_kit=not (spec.disk_image or spec.from_snapshot))
        # Resolved once, here: the record and the request carry the pin. A restore is not
        # pinned (its node resolves the environment, as before pins): the snapshot does not
        # record the layers it was taken on yet. compat(d03aa3f, 2026-12-07): goes when it does.
        image = None
        if not restoring:
            spec, image = await self.environments.require_spec(spec, tenant=tenant)
        sandbox_id = f"sb-{secrets.token_hex(8)}"
        if self.quotas is not None:  # 429 quota_exceeded, and nothing made
            await self.quotas.admit_sandbox(tenant, sandbox_id, spec)
        try:
            record = await self.store.create_sandbox(sandbox_id, tenant, spec, required_node=required_node,
                                                     image=image)
        except BaseException:
            if self.quotas is not None:
                await self.quotas.drop(tenant, sandbox_id)
            raise
        try:
            await self.bus.publish(SANDBOX_REQUESTED_KEY, SandboxRequested(
                sandbox_id=sandbox_id, tenant=tenant, spec=spec, node_id=required_node, image=image))
        except Exception as exc:
            # Nothing runs it: fail the record (a scheduler that got a copy whose confirm was
            # lost finds it failed and skips it; its reservation, if it made one, goes too).
            await self.store.transition(sandbox_id, SandboxState.failed, reason="request_not_queued")
            await self.store.release(sandbox_id)
            if self.quotas is not None:  # no terminal event tells the ledger of this one
                await self.quotas.drop(tenant, sandbox_id)
            raise ServiceUnavailable(f"could not queue the request; nothing was started ({exc})",
                                     code=exc.code if isinstance(exc, ServiceUnavailable) else None) from exc
        metrics.SANDBOXES_REQUESTED.labels(backend=spec.backend, via="single").inc()
        return record

    async def get(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        record = await self.store.get_sandbox(sandbox_id)
        if record is None:
            record = await asyncio.to_thread(self.history.get, sandbox_id)
        if record is None or record.tenant != tenant:
            # Another tenant's sandbox is indistinguishable from a missing one.
            raise NotFound(f"sandbox {sandbox_id} not found", loc=["path", "sandbox_id"])
        return record

    async def wait(self, tenant: str, sandbox_id: str, target: SandboxState, timeout_s: float) -> SandboxRecord:
        deadline = time.monotonic() + min(timeout_s, self.max_wait_s)
        while True:
            waiter = self.waiters.register(sandbox_id, lambda state: reached(state, target))
            try:
                record = await self.get(tenant, sandbox_id)
                remaining = deadline - time.monotonic()
                if reached(record.state, target) or remaining <= 0:
                    return record
                try:
                    # Events wake us at once; the cap re-reads Redis in case an event was missed.
                    await asyncio.wait_for(waiter.wait(), timeout=min(remaining, 1.0))
                except TimeoutError:
                    pass
            finally:
                self.waiters.unregister(sandbox_id, waiter)

    async def list(self, tenant: str, labels: dict[str, str], state: SandboxState | None) -> list[SandboxRecord]:
        records = await self.store.list_sandboxes(tenant)
        return [r for r in records if _matches(r, labels, state)]

    async def list_page(self, tenant: str, labels: dict[str, str], state: SandboxState | None, *, limit: int,
                        after: str | None, keep: Callable[[SandboxRecord], bool] = lambda _: True,
                        ) -> tuple[Sequence[SandboxRecord], str | None]:
        """One page in id order (``limit`` at most) and the id the next page starts after;
        ``keep``: a further test a record must pass (the dashboard's job and backend filters)."""
        return await self.store.list_sandboxes_page(tenant, limit=limit, after=after,
                                                    keep=lambda r: _matches(r, labels, state) and keep(r))

    async def delete(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        record = await self.get(tenant, sandbox_id)
        if record.state in TERMINAL_STATES:
            return record
        await self.store.mark_delete_requested(sandbox_id)
        if record.state is SandboxState.pending:
            if await lifecycle.transition(self.store, self.bus, sandbox_id, SandboxState.terminated, reason="deleted"):
                return await self.get(tenant, sandbox_id)
            record = await self.get(tenant, sandbox_id)  # the scheduler placed it meanwhile
        if record.node_id and record.state not in TERMINAL_STATES:
            await self.bus.publish(node_routing_key(record.node_id, "stop"),
                                   SandboxStop(sandbox_id=sandbox_id, node_id=record.node_id))
        return await self.get(tenant, sandbox_id)

    async def require_network(self, network: NetworkPolicy, loc: Sequence[str] = ("body",)) -> None:
        """New egress rules for a live sandbox, judged as at create (422)."""
        if self.network is not None:
            await self.network.require(network, loc=loc)

    async def record_network(self, record: SandboxRecord, network: NetworkPolicy) -> None:
        """The record keeps the egress rules its node applies now."""
        await self.store.set_sandbox_spec(record.id, record.spec.model_copy(update={"network": network}))

    async def node_for(self, tenant: str, sandbox_id: str,
                       states: frozenset[SandboxState] = frozenset({SandboxState.running}),
                       ) -> tuple[SandboxRecord, NodeInfo]:
        """The node that runs a sandbox, for data-path calls; 409 unless it is in ``states``."""
        record = await self.get(tenant, sandbox_id)
        if record.state not in states:
            hint = f"; POST /v1/sandboxes/{sandbox_id}/resume first" if record.state is SandboxState.paused else ""
            raise Conflict(f"sandbox {sandbox_id} is {record.state.value}{record.why}{hint}", loc=["path", "sandbox_id"],
                           code="sandbox_not_running")
        node = await self.store.get_node(record.node_id or "")
        if node is None:
            raise ServiceUnavailable(f"node of sandbox {sandbox_id} is not reachable",
                                     extra={"reason": FailureReason.node_lost.value})
        return record, node


def _matches(record: SandboxRecord, labels: dict[str, str], state: SandboxState | None) -> bool:
    return all(record.spec.labels.get(k) == v for k, v in labels.items()) and (state is None or record.state is state)
