"""E2B's control plane in terms of Corral's: every call is a SandboxService / SandboxDataPath
call on the caller's tenant, plus the E2B record (template, metadata, token, deadline).

Lifetimes: E2B's deadline moves (``set_timeout`` overwrites it, connect only extends it), a
Corral sandbox's ``timeout_s`` does not; so the Corral sandbox gets the longest lifetime an
E2B client may ask for (``e2b_max_timeout_s``, a backstop on its node) and the reaper here
kills it at its E2B deadline.
"""

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from corral_api.compat.e2b.errors import E2bError
from corral_api.compat.e2b.repository import E2bRecord, E2bRepository
from corral_api.compat.e2b.schemas import NewSandbox
from corral_api.compat.e2b.templates import TemplateResolver, requests_from_metadata
from corral_api.dataplane.service import SandboxDataPath
from corral_api.sandboxes.schemas import SandboxCreate
from corral_api.sandboxes.service import SandboxService
from corral_api.settings import ApiSettings
from corral_common.contracts.sandboxes import SandboxState
from corral_common.logging import get_logger
from corral_common.store.state_records import SandboxRecord
from corral_common.web.errors import NotFound

log = get_logger(__name__)

CLIENT_ID = "corral"
MIB = 1024 * 1024
_E2B_STATES = {SandboxState.running: "running", SandboxState.paused: "paused"}


def _rfc3339(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z") if ts is not None else None


class E2bSandboxes:
    def __init__(self, sandboxes: SandboxService, data: SandboxDataPath, repo: E2bRepository,
                 settings: ApiSettings, on_gone: Callable[[str], Awaitable[None]] | None = None):
        self.sandboxes = sandboxes
        self.data = data
        self.repo = repo
        self.settings = settings
        # Told when this surface ends a sandbox (the code interpreter drops its contexts).
        self.on_gone = on_gone
        self.templates = TemplateResolver(settings.e2b_templates, settings.e2b_template_metadata_key,
                                          settings.e2b_isolation_metadata_key)

    def _lifetime(self, timeout: int | None, field: str) -> int:
        timeout = self.settings.e2b_default_timeout_s if timeout is None else timeout
        if timeout > self.settings.e2b_max_timeout_s:
            raise E2bError(400, f"{field}: {timeout} s exceeds the longest sandbox lifetime here "
                                f"({self.settings.e2b_max_timeout_s} s)")
        return timeout

    # ---- create / read ----------------------------------------------------------------------

    async def create(self, tenant: str, body: NewSandbox) -> dict[str, Any]:
        timeout = self._lifetime(body.timeout, "timeout")
        try:
            choice = self.templates.resolve(body.template_id, body.metadata)
            spec = SandboxCreate.model_validate({
                "environment": choice.environment, "isolation": choice.isolation, "env": body.env_vars,
                "timeout_s": self.settings.e2b_max_timeout_s, "labels": {"e2b.template": body.template_id[:256]},
                **({"cpu": body.cpu_count} if body.cpu_count else {}),
                **({"memory_mb": body.memory_mb} if body.memory_mb else {}),
                **({"disk_mb": body.disk_size_mb} if body.disk_size_mb else {}),
                **({"requests": asked} if (asked := requests_from_metadata(body.metadata)) else {})})
        except (ValueError, ValidationError) as exc:
            raise E2bError(400, f"invalid sandbox request: {exc}") from None
        record = await self.sandboxes.create(tenant, spec)
        e2b = E2bRecord(sandbox_id=record.id, tenant=tenant, template_id=body.template_id,
                        access_token=secrets.token_hex(16), deadline=time.time() + timeout,
                        metadata=body.metadata, traffic_token=secrets.token_hex(16))
        await self.repo.put(e2b)
        record = await self.sandboxes.wait(tenant, record.id, SandboxState.running, self.settings.e2b_create_wait_s)
        if record.state is not SandboxState.running:
            placed = record.state not in (SandboxState.pending, SandboxState.scheduled)
            if record.state not in (SandboxState.failed, SandboxState.terminated):
                await self.sandboxes.delete(tenant, record.id)
            await self.repo.forget_deadline(record.id)
            if not placed:  # no node had room in the wait: the platform is busy, try again later
                raise E2bError(503, f"sandbox {record.id} could not be placed within "
                                    f"{self.settings.e2b_create_wait_s:g} s: {record.state.value}{record.why}")
            raise E2bError(500, f"sandbox {record.id} did not start: {record.state.value}{record.why}")
        return self._sandbox(record, e2b)

    async def _find(self, tenant: str, sandbox_id: str) -> tuple[SandboxRecord, E2bRecord]:
        """A live E2B sandbox of this tenant, else 404 (another tenant's looks missing)."""
        e2b = await self.repo.get(sandbox_id)
        if e2b is None or e2b.tenant != tenant:
            raise E2bError(404, f"sandbox {sandbox_id} not found")
        try:
            record = await self.sandboxes.get(tenant, sandbox_id)
        except NotFound:
            raise E2bError(404, f"sandbox {sandbox_id} not found") from None
        if record.state not in _E2B_STATES:
            raise E2bError(404, f"sandbox {sandbox_id} not found ({record.state.value})")
        if record.delete_requested:
            # Killed already (by a client or the deadline reaper) and on its way out: E2B's
            # answer for a killed sandbox, so a second kill says False, as envd already does.
            raise E2bError(404, f"sandbox {sandbox_id} not found (being deleted)")
        return record, e2b

    def _sandbox(self, record: SandboxRecord, e2b: E2bRecord) -> dict[str, Any]:
        return {"templateID": e2b.template_id, "sandboxID": record.id, "clientID": CLIENT_ID,
                "envdVersion": self.settings.e2b_envd_version, "envdAccessToken": e2b.access_token,
                "alias": e2b.template_id, "domain": None, "trafficAccessToken": e2b.traffic_token or None}

    def _listed(self, record: SandboxRecord, e2b: E2bRecord) -> dict[str, Any]:
        spec = record.spec
        return {"templateID": e2b.template_id, "sandboxID": record.id, "clientID": CLIENT_ID,
                "alias": e2b.template_id, "startedAt": _rfc3339(record.started_at or record.created_at),
                "endAt": _rfc3339(e2b.deadline), "cpuCount": max(1, round(spec.cpu)), "memoryMB": spec.memory_mb,
                "diskSizeMB": spec.disk_mb, "state": _E2B_STATES[record.state], "metadata": e2b.metadata,
                "envdVersion": self.settings.e2b_envd_version}

    async def detail(self, tenant: str, sandbox_id: str) -> dict[str, Any]:
        record, e2b = await self._find(tenant, sandbox_id)
        return {**self._listed(record, e2b), "envdAccessToken": e2b.access_token, "domain": None,
                "allowInternetAccess": False}

    async def list_page(self, tenant: str, states: set[str], metadata: dict[str, str], template: str | None,
                   order: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int | None]:
        """One page of the tenant's E2B sandboxes, oldest first (or newest with order=desc), and
        the offset of the next page (None: last page)."""
        records = [r for r in await self.sandboxes.store.list_sandboxes(tenant) if r.state in _E2B_STATES]
        e2bs = await self.repo.get_many([r.id for r in records])
        rows = []
        for record in sorted(records, key=lambda r: (r.created_at, r.id), reverse=order == "desc"):
            e2b = e2bs.get(record.id)
            if e2b is None or e2b.tenant != tenant or _E2B_STATES[record.state] not in states:
                continue
            if any(e2b.metadata.get(k) != v for k, v in metadata.items()):
                continue
            if template and template != e2b.template_id:
                continue
            rows.append(self._listed(record, e2b))
        page = rows[offset:offset + limit]
        return page, offset + limit if offset + limit < len(rows) else None

    async def metrics(self, tenant: str, sandbox_id: str, start: int | None, end: int | None) -> list[dict[str, Any]]:
        """E2B's ``SandboxMetric`` list: one point, read on the sandbox's node now (Corral keeps
        no time series; a window that does not hold "now" is empty). CPU is the average share of
        the sandbox's cpus over its life so far; memory its working set (cgroup less inactive
        page cache), disk the bytes on its own disk."""
        record, _ = await self._find(tenant, sandbox_id)
        now = time.time()
        if (start is not None and start > now) or (end is not None and end < (record.started_at or record.created_at)):
            return []
        usage = await self.data.usage(tenant, sandbox_id)
        spec = record.spec
        busy = usage.cpu_seconds / usage.wall_time_s / spec.cpu if usage.wall_time_s > 0 and spec.cpu > 0 else 0.0
        return [{"timestamp": _rfc3339(now), "timestampUnix": int(now), "cpuCount": max(1, round(spec.cpu)),
                 "cpuUsedPct": round(min(100.0, 100.0 * busy), 2),
                 "memUsed": usage.working_set_bytes or usage.peak_memory_bytes, "memTotal": spec.memory_mb * MIB,
                 "memCache": 0, "diskUsed": usage.disk_used_bytes, "diskTotal": spec.disk_mb * MIB}]

    # ---- lifecycle --------------------------------------------------------------------------

    async def connect(self, tenant: str, sandbox_id: str, timeout: int | None) -> tuple[dict[str, Any], int]:
        """Connect, resuming a paused sandbox: (body, 201 if it was resumed else 200). A timeout
        only ever extends the deadline."""
        record, e2b = await self._find(tenant, sandbox_id)
        status = 200
        if record.state is SandboxState.paused:
            record = await self.data.resume(tenant, sandbox_id)
            status = 201
        if timeout:
            deadline = time.time() + self._lifetime(timeout, "timeout")
            if deadline > e2b.deadline:
                e2b.deadline = deadline
                await self.repo.set_deadline(sandbox_id, deadline)
        return self._sandbox(record, e2b), status

    async def set_timeout(self, tenant: str, sandbox_id: str, timeout: int) -> None:
        await self._find(tenant, sandbox_id)
        await self.repo.set_deadline(sandbox_id, time.time() + self._lifetime(timeout, "timeout"))

    async def pause(self, tenant: str, sandbox_id: str) -> None:
        record, _ = await self._find(tenant, sandbox_id)
        if record.state is SandboxState.paused:
            raise E2bError(409, f"sandbox {sandbox_id} is already paused")
        await self.data.pause(tenant, sandbox_id)

    async def kill(self, tenant: str, sandbox_id: str) -> None:
        await self._find(tenant, sandbox_id)
        await self.sandboxes.delete(tenant, sandbox_id)
        await self.repo.forget_deadline(sandbox_id)
        await self._gone(sandbox_id)

    async def _gone(self, sandbox_id: str) -> None:
        if self.on_gone is not None:
            await self.on_gone(sandbox_id)

    # ---- the reaper ------------------------------------------------------------------------

    async def reap_once(self) -> list[str]:
        """Kill the sandboxes whose deadline passed; returns their ids."""
        reaped = []
        for sandbox_id in await self.repo.due():
            deadline = await self.repo.claim(sandbox_id)
            if deadline is None:
                continue  # another replica's reaper took it, or its timeout was just extended
            e2b = await self.repo.get(sandbox_id)
            if e2b is None:
                continue
            try:
                await self.sandboxes.delete(e2b.tenant, sandbox_id)
            except NotFound:
                continue
            except BaseException:
                await self.repo.unclaim(sandbox_id, deadline)  # not killed: due again next pass
                raise
            await self._gone(sandbox_id)
            reaped.append(sandbox_id)
            log.info("e2b.sandbox_expired", sandbox_id=sandbox_id)
        return reaped

    async def reap_forever(self, interval_s: float) -> None:
        while True:
            try:
                await self.reap_once()
            except Exception:
                log.exception("e2b.reaper_failed")
            await asyncio.sleep(interval_s)
