"""Public fncall endpoints: one call, batches, runtimes (their metrics are on the api's /metrics; SandboxFusion's
/run_code is an adapter over them: corral_api.compat.sandboxfusion). ``FncallService`` is built with the app's other
services (corral_api.services)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response
from fastapi.responses import StreamingResponse
from fastapi.routing import APIRoute

from corral_api.auth.dependencies import Tenant
from corral_api.body_limits import body_limit
from corral_api.deps import provide
from corral_api.fncall.schemas import (
    MAX_BATCH_CALLS,
    Batch,
    BatchPage,
    BatchRequest,
    FncallRequest,
    FncallResponse,
    RuntimeList,
)
from corral_api.fncall.service import FncallService
from corral_api.quotas.service import TenantQuotas
from corral_common.web.errors import ERROR_RESPONSES


class LimitedBodyRoute(APIRoute):
    """A call's body may be up to fncall.max_body_mb, a batch's fncall.batch_max_body_mb
    (counted as it arrives, before it is parsed: corral_api.body_limits)."""

    def __init__(self, path: str, *args, **kwargs):
        super().__init__(path, *args, **kwargs)
        setting = "fncall.batch_max_body_mb" if path.endswith("/batch") else "fncall.max_body_mb"
        self.openapi_extra = body_limit(setting, self.openapi_extra)


router = APIRouter(route_class=LimitedBodyRoute)


Service = Annotated[FncallService, Depends(provide(FncallService))]


Quotas = Annotated[TenantQuotas, Depends(provide(TenantQuotas))]


async def take_fncall_quota(quotas: TenantQuotas, tenant: str, calls: int, loc: list) -> None:
    """The tenant's max_fncall_per_s (a token bucket in Redis): 429 quota_exceeded past it."""
    await quotas.take_fncall(tenant, calls, loc)


@router.post("/v1/fncall", response_model=FncallResponse, tags=["fncall"], operation_id="fncall",
             responses=ERROR_RESPONSES)
async def fncall(body: FncallRequest, tenant: Tenant, service: Service, quotas: Quotas) -> FncallResponse:
    """Run code statelessly: compile once, run every test case in a fresh isolated sandbox, judge."""
    await take_fncall_quota(quotas, tenant, 1, ["body"])
    return await service.call(body)


@router.get("/v1/fncall/runtimes", response_model=RuntimeList, tags=["fncall"], operation_id="list_fncall_runtimes",
            responses=ERROR_RESPONSES)
async def runtimes(tenant: Tenant, service: Service) -> RuntimeList:
    return RuntimeList(items=await service.runtimes())


@router.post("/v1/fncall/batch", status_code=202, response_model=Batch, tags=["fncall"],
             operation_id="create_fncall_batch", responses=ERROR_RESPONSES)
async def create_batch(body: BatchRequest, tenant: Tenant, service: Service, quotas: Quotas,
                       response: Response) -> Batch:
    """Up to 10,000 calls. Answers at once with the batch id; page, wait for or stream the results."""
    await take_fncall_quota(quotas, tenant, len(body.calls), ["body", "calls"])
    batch = await service.create_batch(tenant, body.calls)
    response.headers["Location"] = f"/v1/fncall/batch/{batch.id}"
    return batch


BatchId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[0-9a-f]+$")]
# Past the largest batch nothing is left to read (and Redis takes no index beyond 64 bits).
BatchOffset = Annotated[int, Query(ge=0, le=MAX_BATCH_CALLS)]


@router.get("/v1/fncall/batch/{batch_id}", response_model=BatchPage, tags=["fncall"], operation_id="get_fncall_batch",
            responses=ERROR_RESPONSES)
async def get_batch(batch_id: BatchId, tenant: Tenant, service: Service,
                    offset: BatchOffset = 0,
                    limit: Annotated[int, Query(ge=0, le=10_000)] = 1000,
                    wait: Annotated[bool, Query(description="Block until every call has finished")] = False,
                    timeout: Annotated[float, Query(gt=0, le=3600)] = 300.0) -> BatchPage:
    """Results in completion order from ``offset`` (each with its call's ``index``)."""
    return await service.get_batch(tenant, batch_id, offset=offset, limit=limit, wait=wait, timeout=timeout)


@router.get("/v1/fncall/batch/{batch_id}/stream", tags=["fncall"], operation_id="stream_fncall_batch",
            responses={**ERROR_RESPONSES, 200: {"content": {"application/x-ndjson": {}},
                                                "description": "One {index, result} per line, then {batch}"}})
async def stream_batch(batch_id: BatchId, tenant: Tenant, service: Service,
                       offset: BatchOffset = 0) -> StreamingResponse:
    stream = service.stream_batch(tenant, batch_id, offset)
    first = await anext(stream)  # a missing batch is a 404, not an empty 200
    return StreamingResponse(_prepend(first, stream), media_type="application/x-ndjson")


async def _prepend(first: bytes, rest):
    yield first
    async for chunk in rest:
        yield chunk
