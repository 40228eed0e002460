"""Node-agent endpoints of the fncall pools (status; their metrics are on the node's /metrics) and their lifespan.

Included by the node-agent app; the router's lifespan runs inside the app's, so
``app.state.settings`` (node id, AMQP URL, the nested ``fncall`` settings) is there when the
pools start.
"""

from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Request

from corral_common.contracts.node import FncallPoolsStatus
from corral_common.internal import INTERNAL_ONLY
from corral_node_agent.fncall.service import FncallPools, instance_of


@asynccontextmanager
async def lifespan(app: FastAPI):
    settings = app.state.settings
    pools = FncallPools(settings.node_id, settings.amqp_url, settings.fncall, instance=instance_of(settings.state_dir),
                        layers=app.state.manager.layers, publish_timeout_s=settings.amqp_publish_timeout_s)
    app.state.fncall = pools
    await pools.start()
    try:
        yield
    finally:
        await pools.close()


router = APIRouter(lifespan=lifespan)


# (exclude_none: before the pools start, the answer has no node_id)
@router.get("/v1/fncall/pools", tags=["fncall"], dependencies=INTERNAL_ONLY, response_model_exclude_none=True)
async def pools_status(request: Request) -> FncallPoolsStatus:
    pools: FncallPools | None = getattr(request.app.state, "fncall", None)
    return FncallPoolsStatus.model_validate(pools.status() if pools else {"status": "not started", "pools": []})
