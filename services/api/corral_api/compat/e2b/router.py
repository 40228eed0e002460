"""E2B's control-plane REST routes (what e2b 2.63.0 calls; v1 paths for older SDKs).

Authenticated by ``X-API-Key`` (any Corral API key; operators hand E2B clients keys of the
``e2b_`` + 40 hex form, as E2B's SDK versions around 2.40 insist on it). Left out of the
OpenAPI document: the schema is E2B's, and Corral's own SDK must not grow these routes.
"""

from typing import Annotated
from urllib.parse import parse_qsl, unquote

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import JSONResponse

from corral_api.auth.dependencies import Tenant
from corral_api.compat.e2b.errors import E2bError, E2bRoute
from corral_api.compat.e2b.schemas import ConnectBody, NewSandbox, TimeoutBody
from corral_api.compat.e2b.service import E2bSandboxes
from corral_api.deps import provide

router = APIRouter(route_class=E2bRoute, include_in_schema=False, tags=["e2b"])


Service = Annotated[E2bSandboxes, Depends(provide(E2bSandboxes))]


@router.post("/sandboxes", status_code=201)
@router.post("/v2/sandboxes", status_code=201)
async def create(body: NewSandbox, tenant: Tenant, service: Service) -> JSONResponse:
    return JSONResponse(await service.create(tenant, body), status_code=201)


def _metadata_filter(raw: str | None) -> dict[str, str]:
    # The SDK sends urlencode({quote(k): quote(v)}) as one query value: k%3Dv%26k2%3Dv2.
    if not raw:
        return {}
    return {unquote(k): unquote(v) for k, v in parse_qsl(unquote(raw), keep_blank_values=True)}


def _offset(token: str | None) -> int:
    if not token:
        return 0
    if not token.isdigit() or len(token) > 9:
        raise E2bError(400, "nextToken: not a token this server issued")
    return int(token)


@router.get("/v2/sandboxes")
async def list_v2(tenant: Tenant, service: Service, state: str | None = None, metadata: str | None = None,
                  template: str | None = None, order: str = "asc",
                  limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                  next_token: Annotated[str | None, Query(alias="nextToken", max_length=16)] = None) -> Response:
    states = set(filter(None, (state or "running,paused").split(",")))
    if not states <= {"running", "paused"}:
        raise E2bError(400, f"state: {state!r}: use running and/or paused")
    if order not in ("asc", "desc"):
        raise E2bError(400, "order: use asc or desc")
    page, next_offset = await service.list_page(tenant, states, _metadata_filter(metadata), template, order, limit,
                                           _offset(next_token))
    headers = {"X-Next-Token": str(next_offset)} if next_offset is not None else {}
    return JSONResponse(page, headers=headers)


@router.get("/sandboxes")
async def list_v1(tenant: Tenant, service: Service, metadata: str | None = None) -> Response:
    """SDK 1.x: running sandboxes, one page."""
    page, _ = await service.list_page(tenant, {"running"}, _metadata_filter(metadata), None, "asc", 10_000, 0)
    return JSONResponse(page)


@router.get("/sandboxes/{sandbox_id}")
async def get(sandbox_id: str, tenant: Tenant, service: Service) -> JSONResponse:
    return JSONResponse(await service.detail(tenant, sandbox_id))


@router.get("/sandboxes/{sandbox_id}/metrics")
async def metrics(sandbox_id: str, tenant: Tenant, service: Service,
                  start: Annotated[int | None, Query(ge=0, le=2**40)] = None,
                  end: Annotated[int | None, Query(ge=0, le=2**40)] = None) -> JSONResponse:
    return JSONResponse(await service.metrics(tenant, sandbox_id, start, end))


@router.delete("/sandboxes/{sandbox_id}", status_code=204)
async def kill(sandbox_id: str, tenant: Tenant, service: Service) -> Response:
    await service.kill(tenant, sandbox_id)
    return Response(status_code=204)


@router.post("/sandboxes/{sandbox_id}/timeout", status_code=204)
async def set_timeout(sandbox_id: str, body: TimeoutBody, tenant: Tenant, service: Service) -> Response:
    await service.set_timeout(tenant, sandbox_id, body.timeout)
    return Response(status_code=204)


@router.post("/sandboxes/{sandbox_id}/pause", status_code=204)
async def pause(sandbox_id: str, tenant: Tenant, service: Service) -> Response:
    await service.pause(tenant, sandbox_id)
    return Response(status_code=204)


@router.post("/sandboxes/{sandbox_id}/connect")
@router.post("/v2/sandboxes/{sandbox_id}/connect")
@router.post("/sandboxes/{sandbox_id}/resume")
async def connect(sandbox_id: str, tenant: Tenant, service: Service, body: ConnectBody | None = None) -> JSONResponse:
    sandbox, status = await service.connect(tenant, sandbox_id, body.timeout if body else None)
    return JSONResponse(sandbox, status_code=status)
