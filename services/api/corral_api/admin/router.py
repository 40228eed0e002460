"""Administration for operator keys: /v1/admin/tenants and /v1/admin/keys (a tenant key is a
403 ``operator_only``); and /v1/usage, a tenant's own usage with its own key."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from corral_api.admin.schemas import (
    CreatedKey,
    Key,
    KeyCreate,
    KeyList,
    RotatedKey,
    Tenant,
    TenantCreate,
    TenantDetail,
    TenantList,
    TenantUpdate,
    TenantUsage,
)
from corral_api.admin.service import AdminService
from corral_api.auth.dependencies import Operator
from corral_api.auth.dependencies import Tenant as CallerTenant
from corral_api.deps import provide
from corral_common.web.errors import ERROR_RESPONSES

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=ERROR_RESPONSES)
usage_router = APIRouter(tags=["admin"], responses=ERROR_RESPONSES)


Service = Annotated[AdminService, Depends(provide(AdminService))]


@router.get("/tenants", response_model=TenantList, operation_id="list_tenants")
async def list_tenants(_: Operator, service: Service) -> TenantList:
    return TenantList(tenants=await service.list_tenants())


@router.post("/tenants", status_code=201, response_model=Tenant, operation_id="create_tenant")
async def create_tenant(body: TenantCreate, _: Operator, service: Service) -> JSONResponse:
    """A new tenant (409 if it exists); it has no key until ``POST /v1/admin/keys``."""
    tenant = await service.create_tenant(body)
    return JSONResponse(tenant.model_dump(mode="json"), status_code=201,
                        headers={"Location": f"/v1/admin/tenants/{tenant.name}"})


@router.get("/tenants/{name}", response_model=TenantDetail, operation_id="get_tenant")
async def get_tenant(name: str, _: Operator, service: Service) -> TenantDetail:
    """The tenant, its quotas and its usage (now, and the totals of its ended sandboxes)."""
    return await service.get_tenant(name)


@router.patch("/tenants/{name}", response_model=TenantDetail, operation_id="update_tenant")
async def update_tenant(name: str, body: TenantUpdate, _: Operator, service: Service) -> TenantDetail:
    """Change the quotas given (null: unlimited), or disable the tenant. Applies at once on every replica."""
    return await service.update_tenant(name, body)


@router.get("/keys", response_model=KeyList, operation_id="list_keys")
async def list_keys(_: Operator, service: Service,
                    tenant: Annotated[str | None, Query(max_length=128)] = None) -> KeyList:
    """Every key (or one tenant's): ids, names, roles, prefixes; never the keys themselves."""
    return KeyList(keys=await service.list_keys(tenant))


@router.post("/keys", status_code=201, response_model=CreatedKey, operation_id="create_key")
async def create_key(body: KeyCreate, _: Operator, service: Service) -> CreatedKey:
    """A new key for a tenant; the answer holds the key, shown this once."""
    return await service.create_key(body)


@router.post("/keys/{key_id}/rotate", response_model=RotatedKey, operation_id="rotate_key")
async def rotate_key(key_id: str, _: Operator, service: Service) -> RotatedKey:
    """A new key in place of this one (same tenant, name, role); the old one is refused (401) at once."""
    return await service.rotate_key(key_id)


@router.delete("/keys/{key_id}", response_model=Key, operation_id="revoke_key")
async def revoke_key(key_id: str, _: Operator, service: Service) -> Key:
    """Revoke the key: refused (401) at once on every api replica."""
    return await service.revoke_key(key_id)


@usage_router.get("/v1/usage", response_model=TenantUsage, operation_id="get_usage")
async def get_usage(tenant: CallerTenant, service: Service) -> TenantUsage:
    """Your tenant's usage: what its live sandboxes hold now and the totals of those that ended."""
    return await service.usage(tenant)
