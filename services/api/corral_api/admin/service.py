"""Administration: tenants and their quotas, API keys (create, rotate, revoke), usage; and
``TenantQuotas``, the quota gate the create paths call (sandboxes, jobs, images, fncall)."""

import asyncio
import time
from collections.abc import Awaitable, Callable

from corral_api.admin.quotas import Demand, QuotaLedger
from corral_api.admin.repository import TenantRepository, UsageRepository
from corral_api.admin.schemas import (
    CreatedKey,
    Key,
    KeyCreate,
    RotatedKey,
    Tenant,
    TenantCreate,
    TenantDetail,
    TenantUpdate,
    TenantUsage,
    TenantUsageNow,
    TenantUsageTotals,
)
from corral_api.auth.service import ApiKeyService, AuthVersion
from corral_common.errors import Conflict, NotFound, TooManyRequests
from corral_common.logging import get_logger
from corral_common.sandboxes import TERMINAL_STATES, SandboxSpec, SandboxState
from corral_common.state import SandboxRecord

log = get_logger(__name__)

# An entry admitted this recently is never taken for a leak (its record may not exist yet).
RECONCILE_MIN_AGE_S = 60.0


class TenantQuotas:
    """A tenant's quotas (SQL, cached per auth version like the keys) over the Redis ledger."""

    def __init__(self, tenants: TenantRepository, ledger: QuotaLedger, version: AuthVersion):
        self.tenants = tenants
        self.ledger = ledger
        self.version = version
        self._cache: dict[str, tuple[dict, str]] = {}

    async def quotas(self, tenant: str) -> dict:
        version = await self.version.current()
        cached = self._cache.get(tenant)
        if cached is not None and version is not None and cached[1] == version:
            return cached[0]
        row = await asyncio.to_thread(self.tenants.get, tenant)
        quotas = dict(row.quotas) if row is not None else {}
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
        quotas = await self.quotas(tenant)
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
        redis = self.ledger.redis
        given = 0
        now = time.time()
        for entry, (_, admitted_at) in (await self.ledger.entries(tenant)).items():
            if now - admitted_at < RECONCILE_MIN_AGE_S:
                continue
            state = await redis.hget(f"sb:{entry}", "state")
            state = state.decode() if isinstance(state, bytes) else state
            # A job's entry (a job sandbox's own entry, "job-…-N", has a record: see release()).
            if state is None and entry.startswith("job-"):
                job = await redis.hmget(f"job:{entry}", "deleted")
                gone = job[0] is None and not await redis.exists(f"job:{entry}")
                if gone or job[0] in (b"1", "1"):
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
        rate = (await self.quotas(tenant)).get("max_fncall_per_s")
        await self.ledger.take_fncall(tenant, calls, rate, loc or ["body"])

    async def image_quota_bytes(self, tenant: str, default: int | None) -> int | None:
        """The tenant's own max_image_bytes, else the operator's default (image_quota_mb)."""
        own = (await self.quotas(tenant)).get("max_image_bytes")
        return default if own is None else own


class AdminService:
    def __init__(self, tenants: TenantRepository, usage: UsageRepository, keys: ApiKeyService,
                 quotas: TenantQuotas, image_bytes: Callable[[str], Awaitable[int]]):
        self.tenants = tenants
        self.usage_rows = usage
        self.keys = keys
        self.quotas = quotas
        self.image_bytes = image_bytes

    async def _changed(self) -> None:
        """Every replica's cached keys and quotas are stale from now on (auth/service.py)."""
        await self.keys.version.bump()

    async def _tenant(self, name: str, loc: list) -> Tenant:
        # A NUL cannot be in any stored name (and PostgreSQL refuses it in a query): no such tenant.
        row = None if "\0" in name else await asyncio.to_thread(self.tenants.get, name)
        if row is None:
            raise NotFound(f"tenant {name!r} not found", loc=loc, code="tenant_not_found")
        return Tenant.of(row)

    # ---- tenants ---------------------------------------------------------------------------

    async def list_tenants(self) -> list[Tenant]:
        return [Tenant.of(row) for row in await asyncio.to_thread(self.tenants.list)]

    async def create_tenant(self, body: TenantCreate) -> Tenant:
        row = await asyncio.to_thread(self.tenants.create, body.name, body.quotas.model_dump(exclude_none=True))
        if row is None:
            raise Conflict(f"tenant {body.name!r} exists", loc=["body", "name"], code="tenant_exists")
        await self._changed()
        return Tenant.of(row)

    async def get_tenant(self, name: str) -> TenantDetail:
        tenant = await self._tenant(name, ["path", "name"])
        return TenantDetail(**tenant.model_dump(), usage=await self.usage(name))

    async def update_tenant(self, name: str, body: TenantUpdate) -> TenantDetail:
        await self._tenant(name, ["path", "name"])
        quotas = body.quotas.model_dump(exclude_unset=True) if body.quotas is not None else None
        row = await asyncio.to_thread(self.tenants.update, name, quotas, body.disabled)
        if row is None:
            raise NotFound(f"tenant {name!r} not found", loc=["path", "name"], code="tenant_not_found")
        await self._changed()
        return await self.get_tenant(name)

    async def usage(self, tenant: str) -> TenantUsage:
        used = await self.quotas.ledger.used(tenant)
        try:
            image_bytes = await self.image_bytes(tenant)
        except Exception:  # noqa: BLE001 - image-service away: the rest of the usage still answers
            log.warning("usage.image_bytes_unavailable", tenant=tenant)
            image_bytes = None
        totals = await asyncio.to_thread(self.usage_rows.totals, tenant)
        return TenantUsage(tenant=tenant, current=TenantUsageNow(**used, image_bytes=image_bytes),
                     totals=TenantUsageTotals(**totals))

    # ---- keys ------------------------------------------------------------------------------

    async def list_keys(self, tenant: str | None) -> list[Key]:
        if tenant is not None:
            await self._tenant(tenant, ["query", "tenant"])
        return [Key.of(row) for row in await asyncio.to_thread(self.keys.list, tenant)]

    async def create_key(self, body: KeyCreate) -> CreatedKey:
        await self._tenant(body.tenant, ["body", "tenant"])
        row, key = await asyncio.to_thread(self.keys.create, body.tenant, name=body.name, role=body.role)
        await self._changed()
        return CreatedKey(**Key.of(row).model_dump(), key=key)

    async def _key(self, key_id: str) -> Key:
        row = None if "\0" in key_id else await asyncio.to_thread(self.keys.get, key_id)
        if row is None:
            raise NotFound(f"key {key_id!r} not found", loc=["path", "key_id"], code="key_not_found")
        return Key.of(row)

    async def rotate_key(self, key_id: str) -> RotatedKey:
        old = await self._key(key_id)
        if old.revoked_at is not None:
            raise Conflict(f"key {key_id!r} is revoked; create a new one", loc=["path", "key_id"], code="key_revoked")
        rotated = await asyncio.to_thread(self.keys.rotate, key_id)
        if rotated is None:  # revoked meanwhile by another call
            raise Conflict(f"key {key_id!r} is revoked; create a new one", loc=["path", "key_id"], code="key_revoked")
        new, key, _ = rotated
        await self._changed()
        return RotatedKey(**Key.of(new).model_dump(), key=key, replaces=key_id)

    async def revoke_key(self, key_id: str) -> Key:
        await self._key(key_id)
        row = await asyncio.to_thread(self.keys.revoke, key_id)
        await self._changed()
        return Key.of(row)
