"""Public fncall endpoints: one call, batches, runtimes (their metrics are on the api's /metrics; SandboxFusion's
/run_code is an adapter over them: corral_api.compat.sandboxfusion). The router's lifespan (nested in the app's) connects the RPC client and Redis;
its settings are ``app.state.settings.fncall`` (the app factory's)."""

from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from fastapi.routing import APIRoute

from corral_api.auth.dependencies import Tenant
from corral_api.body_limits import body_limit
from corral_api.fncall.rpc import FncallRpc
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
from corral_api.fncall.warmup import FncallWarmup
from corral_common.contracts.fncall import RUNTIMES
from corral_common.errors import ERROR_RESPONSES
from corral_common.redis_client import connect


class LimitedBodyRoute(APIRoute):
    """A call's body may be up to fncall.max_body_mb, a batch's fncall.batch_max_body_mb
    (counted as it arrives, before it is parsed: corral_api.body_limits)."""

    def __init__(self, path: str, *args, **kwargs):
        super().__init__(path, *args, **kwargs)
        setting = "fncall.batch_max_body_mb" if path.endswith("/batch") else "fncall.max_body_mb"
        self.openapi_extra = body_limit(setting, self.openapi_extra)


@asynccontextmanager
async def lifespan(app: FastAPI):
    settings = app.state.settings
    rpc = await FncallRpc(settings.amqp_url, RUNTIMES, publish_timeout_s=settings.amqp_publish_timeout_s).connect()
    redis = connect(settings.redis_url, decode_responses=False, **settings.redis_pool())
    warmup = FncallWarmup(app.state.sandboxes.store, app.state.node_client, settings.heartbeat_timeout_s)
    app.state.fncall = FncallService(rpc, redis, settings.fncall, warmup)
    app.state.fncall_gauges = app.state.fncall.refresh_gauges  # read at each /metrics scrape
    try:
        yield
    finally:
        await app.state.fncall.close()
        await rpc.close()
        await redis.aclose()


router = APIRouter(lifespan=lifespan, route_class=LimitedBodyRoute)


async def fncall_service(request: Request) -> FncallService:
    return request.app.state.fncall


Service = Annotated[FncallService, Depends(fncall_service)]


async def take_fncall_quota(request: Request, tenant: str, calls: int, loc: list) -> None:
    """The tenant's max_fncall_per_s (a token bucket in Redis): 429 quota_exceeded past it."""
    quotas = getattr(request.app.state, "quotas", None)
    if quotas is not None:
        await quotas.take_fncall(tenant, calls, loc)


@router.post("/v1/fncall", response_model=FncallResponse, tags=["fncall"], operation_id="fncall",
             responses=ERROR_RESPONSES)
async def fncall(request: Request, body: FncallRequest, tenant: Tenant, service: Service) -> FncallResponse:
    """Run code statelessly: compile once, run every test case in a fresh isolated sandbox, judge."""
    await take_fncall_quota(request, tenant, 1, ["body"])
    return await service.call(body)


@router.get("/v1/fncall/runtimes", response_model=RuntimeList, tags=["fncall"], operation_id="list_fncall_runtimes",
            responses=ERROR_RESPONSES)
async def runtimes(tenant: Tenant, service: Service) -> RuntimeList:
    return RuntimeList(items=await service.runtimes())


@router.post("/v1/fncall/batch", status_code=202, response_model=Batch, tags=["fncall"],
             operation_id="create_fncall_batch", responses=ERROR_RESPONSES)
async def create_batch(request: Request, body: BatchRequest, tenant: Tenant, service: Service,
                       response: Response) -> Batch:
    """Up to 10,000 calls. Answers at once with the batch id; page, wait for or stream the results."""
    await take_fncall_quota(request, tenant, len(body.calls), ["body", "calls"])
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
