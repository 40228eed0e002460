"""What the dashboard shows, read through the api's own services (SandboxService, JobService,
RolloutService, FncallService, ImageCatalogService, the node heartbeats in the StateStore) with
the same tenant scoping as the REST API: every call takes the session's tenant. Nothing here
is a second implementation; it only gathers and counts for the pages."""

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from corral_api.fncall import metrics as fncall_metrics
from corral_api.fncall.service import FncallService
from corral_api.images.service import ImageCatalogService
from corral_api.jobs.service import JobService
from corral_api.rollouts.service import RolloutService
from corral_api.sandboxes.service import SandboxService
from corral_common.contracts.fncall import RUNTIMES
from corral_common.contracts.sandboxes import TERMINAL_STATES, SandboxState
from corral_common.logging import get_logger
from corral_common.store.state import StateStore
from corral_common.store.state_nodes import NodeInfo
from corral_common.store.state_records import SandboxRecord
from corral_common.web.errors import CorralError

log = get_logger(__name__)

# Creations per second are counted over this window of the tenant's own records.
RATE_WINDOW_S = 60.0
MAX_JOBS_SHOWN = 50
MAX_ROLLOUTS_SHOWN = 100
# Sandboxes per page of the sandbox list (a page is read from Redis as GET /v1/sandboxes?limit= reads it).
SANDBOX_PAGE_SIZE = 50
MAX_SANDBOX_PAGE_SIZE = 500


@dataclass
class SandboxFilter:
    state: SandboxState | None = None
    label: dict[str, str] = field(default_factory=dict)
    job: str = ""
    backend: str = ""

    def matches(self, record: SandboxRecord) -> bool:
        return ((not self.job or record.job_id == self.job or record.spec.labels.get("job") == self.job)
                and (not self.backend or record.spec.backend == self.backend))


@dataclass
class NodeLoad:
    node: NodeInfo
    cpu_pct: float
    memory_pct: float
    sandboxes_pct: float
    age_s: float


def _pct(used: float, total: float) -> float:
    return round(100.0 * used / total, 1) if total else 0.0


def node_load(node: NodeInfo, now: float) -> NodeLoad:
    return NodeLoad(node=node, cpu_pct=_pct(node.used_cpu_milli, node.cpu_milli),
                    memory_pct=_pct(node.used_memory_mb, node.memory_mb),
                    sandboxes_pct=_pct(node.used_sandboxes, node.max_sandboxes), age_s=round(now - node.heartbeat_at, 1))


def timeline(record: SandboxRecord) -> list[tuple[float, str]]:
    """The sandbox's lifecycle as its record keeps it: when it was asked for, started, ended,
    and its current state with the reason."""
    events = [(record.created_at, "created (pending)")]
    if record.started_at:
        events.append((record.started_at, "running"))
    if record.ended_at:
        events.append((record.ended_at, record.state.value + (f": {record.reason}" if record.reason else "")))
    elif record.state not in (SandboxState.pending, SandboxState.running):
        events.append((record.updated_at, record.state.value + (f": {record.reason}" if record.reason else "")))
    return sorted(events)


class DashboardService:
    """Over the services the REST routers use, each given by the composition root."""

    def __init__(self, sandboxes: SandboxService, *, store: StateStore, heartbeat_timeout_s: float,
                 jobs: JobService, rollouts: RolloutService, fncall: FncallService, images: ImageCatalogService):
        self._sandboxes = sandboxes
        self._store = store
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._jobs = jobs
        self._rollouts = rollouts
        self._fncall = fncall
        self._images = images

    async def sandboxes(self, tenant: str, flt: SandboxFilter | None = None) -> list[SandboxRecord]:
        flt = flt or SandboxFilter()
        records = await self._sandboxes.list(tenant, flt.label, flt.state)
        return sorted((r for r in records if flt.matches(r)), key=lambda r: r.created_at, reverse=True)

    async def sandbox_page(self, tenant: str, flt: SandboxFilter, *, after: str | None = None,
                           limit: int = SANDBOX_PAGE_SIZE) -> tuple[list[SandboxRecord], str | None]:
        """One page of the list, in id order as the api pages it, and where the next starts:
        the page (re-polled every 2 s) costs the same with 10,000 sandboxes as with 10."""
        records, next_after = await self._sandboxes.list_page(tenant, flt.label, flt.state, limit=limit,
                                                              after=after, keep=flt.matches)
        return list(records), next_after

    async def sandbox(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        return await self._sandboxes.get(tenant, sandbox_id)

    async def nodes(self) -> list[NodeLoad]:
        """Live nodes (platform-wide: capacity is shared, no tenant's data is in it)."""
        nodes = await self._store.live_nodes(self._heartbeat_timeout_s)
        now = time.time()
        return [node_load(n, now) for n in sorted(nodes, key=lambda n: n.node_id)]

    async def fncall_queue_depths(self) -> dict[str, int]:
        try:
            return await self._fncall.rpc.queue_depths()
        except Exception:  # noqa: BLE001 - the broker's numbers are best effort on a page
            log.warning("ui.fncall_depths_unavailable")
            return {}

    async def overview(self, tenant: str) -> dict[str, Any]:
        records = await self.sandboxes(tenant)
        now = time.time()
        live = [r for r in records if r.state not in TERMINAL_STATES]
        by_state = Counter(r.state.value for r in records)
        by_backend = Counter(r.spec.backend for r in live)
        recent = sum(1 for r in records if now - r.created_at <= RATE_WINDOW_S)
        jobs = await self.jobs(tenant)
        return {
            "by_state": dict(sorted(by_state.items())),
            "by_backend": dict(sorted(by_backend.items())),
            "live": len(live),
            "creations_per_s": round(recent / RATE_WINDOW_S, 2),
            "rate_window_s": int(RATE_WINDOW_S),
            "queues": {"sandboxes pending": by_state.get(SandboxState.pending.value, 0),
                       "job sandboxes queued": sum(j.pending for j in jobs),
                       **{f"fncall {k}": v for k, v in sorted((await self.fncall_queue_depths()).items())}},
            "nodes": await self.nodes(),
        }

    async def jobs(self, tenant: str) -> list[Any]:
        """The tenant's jobs (its SQL rows of live jobs, and the jobs its sandboxes belong to),
        each as ``GET /v1/jobs/{id}`` answers it, newest first."""
        service = self._jobs
        ids: set[str] = set()
        if service.rows is not None:
            ids.update(row.id for row in await asyncio.to_thread(service.rows.live) if row.tenant == tenant)
        ids.update(r.job_id for r in await self._sandboxes.list(tenant, {}, None) if r.job_id)
        jobs = []
        for job_id in ids:
            try:
                jobs.append(await service.get(tenant, job_id))
            except CorralError:
                continue  # gone from Redis meanwhile
        return sorted(jobs, key=lambda j: j.created_at, reverse=True)[:MAX_JOBS_SHOWN]

    async def rollouts(self, tenant: str, job_id: str | None = None) -> list[Any]:
        return await self._rollouts.list(tenant, job_id or None, None, MAX_ROLLOUTS_SHOWN)

    async def rollout(self, tenant: str, rollout_id: str) -> Any:
        return await self._rollouts.get(tenant, rollout_id)

    async def fncall(self) -> dict[str, Any]:
        """Calls/s, verdict mix and worker pools per runtime (platform-wide: the api's fncall
        counters carry no tenant)."""
        service = self._fncall
        verdicts: dict[str, Counter] = {r: Counter() for r in RUNTIMES}
        for metric in fncall_metrics.CALLS.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total") and sample.labels.get("runtime") in verdicts:
                    verdicts[sample.labels["runtime"]][sample.labels.get("verdict", "?")] += int(sample.value)
        depths = await self.fncall_queue_depths()
        rows = []
        for runtime in RUNTIMES:
            try:
                workers = await service.rpc.consumers(runtime)
            except Exception:  # noqa: BLE001 - best effort, as above
                workers = None
            rows.append({"runtime": runtime,
                         "calls_per_s": round(service.calls_per_second(runtime), 2),
                         "verdicts": dict(sorted(verdicts[runtime].items())),
                         "queue_depth": depths.get(runtime), "workers": workers})
        return {"runtimes": rows}

    async def images(self, tenant: str) -> dict[str, Any]:
        catalog = self._images
        layers, environments, usage = await asyncio.gather(
            catalog.list_layers(tenant, None), catalog.list_environments(tenant), catalog.usage(tenant))
        return {"layers": layers, "environments": environments, "usage": usage}
