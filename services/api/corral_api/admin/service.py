"""Administration: tenants and their quotas, API keys (create, rotate, revoke), usage. The quota
gate the create paths call is ``corral_api.quotas.service.TenantQuotas``."""

import asyncio
from collections.abc import Awaitable, Callable

from corral_api.admin.repository import UsageRepository
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
from corral_api.auth.service import ApiKeyService
from corral_api.quotas.service import TenantQuotas
from corral_api.tenants.repository import TenantRepository
from corral_common.logging import get_logger
from corral_common.web.errors import Conflict, NotFound

log = get_logger(__name__)

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
