"""``TenantQuotas``, the quota gate the create paths call (sandboxes, jobs, images, fncall): a tenant's
quotas (SQL, cached per auth version like the keys) over the Redis ledger (corral_api.quotas.ledger)."""

import asyncio
import time

from corral_api.auth.service import AuthVersion
from corral_api.quotas.ledger import Demand, QuotaLedger
from corral_api.quotas.schemas import Quotas
from corral_api.tenants.repository import TenantRepository
from corral_common.contracts.sandboxes import TERMINAL_STATES, SandboxSpec, SandboxState
from corral_common.logging import get_logger
from corral_common.store.jobs import JobStore
from corral_common.store.state_records import SandboxRecord
from corral_common.web.errors import TooManyRequests

log = get_logger(__name__)

# An entry admitted this recently is never taken for a leak (its record may not exist yet).
RECONCILE_MIN_AGE_S = 60.0


class TenantQuotas:
    """A tenant's quotas (SQL, cached per auth version like the keys) over the Redis ledger."""

    def __init__(self, tenants: TenantRepository, ledger: QuotaLedger, version: AuthVersion):
        self.tenants = tenants
        self.ledger = ledger
        # The records its entries stand for (a sandbox's, a job's), in the same Redis.
        self.records = JobStore(ledger.redis)
        self.version = version
        self._cache: dict[str, tuple[Quotas, str]] = {}

    async def quotas(self, tenant: str) -> Quotas:
        version = await self.version.current()
        cached = self._cache.get(tenant)
        if cached is not None and version is not None and cached[1] == version:
            return cached[0]
        row = await asyncio.to_thread(self.tenants.get, tenant)
        quotas = Quotas.model_validate(row.quotas) if row is not None else Quotas()
        if version is not None:
            self._cache[tenant] = (quotas, version)
        return quotas

    async def admit_sandbox(self, tenant: str, sandbox_id: str, spec: SandboxSpec, loc: list | None = None) -> None:
        await self._admit(tenant, sandbox_id, Demand(1, spec.cpu, spec.memory_mb, spec.disk_mb), loc or ["body"])

    async def admit_job(self, tenant: str, job_id: str, count: int, spec: SandboxSpec, loc: list | None = None) -> None:
        await self._admit(tenant, job_id, Demand(count, spec.cpu, spec.memory_mb, spec.disk_mb),
                          loc or ["body", "count"])

    async def readmit_job(self, tenant: str, job_id: str, count: int, spec: SandboxSpec) -> None:
        """A job Redis lost, queued again: its ``count`` sandboxes not ended are counted again."""
        await self.ledger.readmit_job(tenant, job_id, Demand(count, spec.cpu, spec.memory_mb, spec.disk_mb))

    async def _admit(self, tenant: str, entry: str, demand: Demand, loc: list) -> None:
        quotas = (await self.quotas(tenant)).model_dump()
        try:
            await self.ledger.admit(tenant, entry, demand, quotas, loc)
        except TooManyRequests:
            # Refused: first give back what ended without its event reaching us (a leak would
            # refuse the tenant for ever), then try once more.
            if not await self.reconcile(tenant):
                raise
            await self.ledger.admit(tenant, entry, demand, quotas, loc)

    async def reconcile(self, tenant: str) -> int:
        """Give back entries whose sandbox ended or is gone, and deleted or vanished jobs'
        rest; returns how many sandboxes were given back."""
        given = 0
        now = time.time()
        for entry, (_, admitted_at) in (await self.ledger.entries(tenant)).items():
            if now - admitted_at < RECONCILE_MIN_AGE_S:
                continue
            [state] = await self.records.sandbox_states([entry])
            # A job's entry (a job sandbox's own entry, "job-…-N", has a record: see release()).
            if state is None and entry.startswith("job-"):
                if await self.records.is_over(entry):
                    given += await self.ledger.release(tenant, entry)
                continue
            if state is None or SandboxState(state) in TERMINAL_STATES:
                given += await self.ledger.release(tenant, entry)
        if given:
            log.warning("quota.reconciled", tenant=tenant, sandboxes=given)
        return given

    async def release(self, record: SandboxRecord) -> None:
        """A sandbox ended: give its share back (to its job's entry when a job made it)."""
        job = record.spec.labels.get("job")
        if job and record.id.startswith(f"{job}-") and await self.ledger.release(record.tenant, job, record.id):
            return
        # Its own entry: not a job's, or a job's that a node registered again after Redis lost
        # the job's entry (StateStore.restore_sandbox counts it under its own id).
        await self.ledger.release(record.tenant, record.id)

    async def drop(self, tenant: str, entry: str) -> None:
        await self.ledger.release(tenant, entry)

    async def take_fncall(self, tenant: str, calls: int, loc: list | None = None) -> None:
        rate = (await self.quotas(tenant)).max_fncall_per_s
        await self.ledger.take_fncall(tenant, calls, rate, loc or ["body"])

    async def image_quota_bytes(self, tenant: str, default: int | None) -> int | None:
        """The tenant's own max_image_bytes, else the operator's default (image_quota_mb)."""
        own = (await self.quotas(tenant)).max_image_bytes
        return default if own is None else own
