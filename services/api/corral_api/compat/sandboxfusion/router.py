"""SandboxFusion routes on the public api: ``/run_code`` (a Corral API key as Bearer), and for
the sandbox-fusion client, which sends no credentials, the same under ``/sandboxfusion/{key}``
(``set_endpoint(f"{api}/sandboxfusion/{key}")``), with its ``/v1/ping``."""

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from corral_api.auth.dependencies import Tenant
from corral_api.auth.service import ApiKeyService
from corral_api.compat.sandboxfusion.schemas import RunCodeRequest, RunCodeResponse
from corral_api.compat.sandboxfusion.service import run_code as run_code_call
from corral_api.deps import provide, service_of
from corral_api.fncall.router import LimitedBodyRoute, Quotas, take_fncall_quota
from corral_api.fncall.service import FncallService
from corral_api.limits import claim_tenant_slot
from corral_common.web.errors import ERROR_RESPONSES, Unauthorized

Service = Annotated[FncallService, Depends(provide(FncallService))]


async def keyed_tenant(api_key: str, request: Request) -> str:
    principal = await service_of(request, ApiKeyService).authenticate(api_key)
    tenant = principal.tenant if principal else None
    if tenant is None:
        raise Unauthorized("invalid API key", loc=["path", "api_key"])
    claim_tenant_slot(request, tenant)  # a key in the path: the middleware did not see it
    return tenant


KeyedTenant = Annotated[str, Depends(keyed_tenant)]
router = APIRouter(route_class=LimitedBodyRoute)


@router.post("/run_code", response_model=RunCodeResponse, tags=["sandboxfusion"], operation_id="run_code",
             responses=ERROR_RESPONSES)
async def run_code(body: RunCodeRequest, tenant: Tenant, service: Service, quotas: Quotas) -> RunCodeResponse:
    """SandboxFusion's run_code (request and response JSON as SandboxFusion's; 504 when the
    call could not finish within compile_timeout + run_timeout + 8 s; 429 past the tenant's
    max_fncall_per_s)."""
    await take_fncall_quota(quotas, tenant, 1, ["body"])
    return await run_code_call(body, service)


@router.post("/sandboxfusion/{api_key}/run_code", response_model=RunCodeResponse, include_in_schema=False)
async def run_code_keyed(body: RunCodeRequest, tenant: KeyedTenant, service: Service,
                         quotas: Quotas) -> RunCodeResponse:
    await take_fncall_quota(quotas, tenant, 1, ["body"])
    return await run_code_call(body, service)


@router.get("/sandboxfusion/{api_key}/v1/ping", include_in_schema=False)
async def ping_keyed(tenant: KeyedTenant) -> str:
    return "pong"
