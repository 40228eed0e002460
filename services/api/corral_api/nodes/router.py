"""Nodes: capacity and use of the live nodes, for ``corral nodes`` and dashboards."""

from typing import Annotated

from fastapi import APIRouter, Depends

from corral_api.auth.dependencies import Tenant
from corral_api.deps import provide
from corral_api.nodes.schemas import NodeList
from corral_api.nodes.service import NodeService
from corral_common.web.errors import ERROR_RESPONSES

router = APIRouter(prefix="/v1/nodes", tags=["nodes"], responses=ERROR_RESPONSES)

Service = Annotated[NodeService, Depends(provide(NodeService))]


@router.get("", response_model=NodeList, operation_id="list_nodes")
async def list_nodes(tenant: Tenant, service: Service) -> NodeList:
    """The live nodes (heartbeat within the timeout) with their capacity and what is reserved
    of it. Counts only: no other tenant's sandboxes are named."""
    return NodeList(items=await service.live())
