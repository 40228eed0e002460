"""Public snapshot endpoints (tenant-scoped; another tenant's snapshot is a 404).
Snapshots are taken with ``POST /v1/sandboxes/{id}/snapshot`` (sandboxes router)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from corral_api.auth.dependencies import Tenant
from corral_api.snapshots.schemas import Snapshot, SnapshotList
from corral_api.snapshots.service import SnapshotService, to_schema
from corral_common.errors import ERROR_RESPONSES

router = APIRouter(prefix="/v1/snapshots", tags=["snapshots"], responses=ERROR_RESPONSES)


async def snapshots(request: Request) -> SnapshotService:
    return request.app.state.snapshots


Snapshots = Annotated[SnapshotService, Depends(snapshots)]


@router.get("", response_model=SnapshotList, operation_id="list_snapshots")
async def list_snapshots(tenant: Tenant, service: Snapshots,
                         sandbox_id: Annotated[str | None, Query(max_length=64)] = None) -> SnapshotList:
    """This tenant's snapshots, oldest first (optionally of one sandbox)."""
    return SnapshotList(items=[to_schema(row) for row in await service.list(tenant, sandbox_id)])


@router.get("/{snapshot_id}", response_model=Snapshot, operation_id="get_snapshot")
async def get_snapshot(snapshot_id: str, tenant: Tenant, service: Snapshots) -> Snapshot:
    return to_schema(await service.get(tenant, snapshot_id))


@router.delete("/{snapshot_id}", response_model=Snapshot, operation_id="delete_snapshot")
async def delete_snapshot(snapshot_id: str, tenant: Tenant, service: Snapshots) -> Snapshot:
    """Remove the saved state from its node and the record; returns what was deleted.
    Sandboxes already restored from it keep running."""
    return to_schema(await service.delete(tenant, snapshot_id))
