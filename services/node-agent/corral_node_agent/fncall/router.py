"""Node-agent endpoints of the fncall pools (status; their metrics are on the node's /metrics).

The pools are built and started with the node's other services (corral_node_agent.app) and
are ``app.state.services.fncall`` (corral_node_agent.container) once started.
"""

from fastapi import APIRouter, Request

from corral_common.contracts.node import FncallPoolsStatus
from corral_common.web.internal import INTERNAL_ONLY
from corral_node_agent.fncall.service import FncallPools

router = APIRouter()


def started_pools(request: Request) -> FncallPools | None:
    """The node's pools; None before they started (or before the app's lifespan built its services)."""
    services = getattr(request.app.state, "services", None)
    return services.fncall if services is not None else None


# (exclude_none: before the pools start, the answer has no node_id)
@router.get("/v1/fncall/pools", tags=["fncall"], dependencies=INTERNAL_ONLY, response_model_exclude_none=True)
async def pools_status(request: Request) -> FncallPoolsStatus:
    pools = started_pools(request)
    return FncallPoolsStatus.model_validate(pools.status() if pools else {"status": "not started", "pools": []})
