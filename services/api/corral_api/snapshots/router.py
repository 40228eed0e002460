"""Public snapshot endpoints (tenant-scoped; another tenant's snapshot is a 404). Snapshots are
taken with ``POST /v1/sandboxes/{id}/snapshot`` (``sandbox_router``: under the sandboxes' path and tag)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response

from corral_api.auth.dependencies import Tenant
from corral_api.deps import provide
from corral_api.snapshots.schemas import Snapshot, SnapshotList
from corral_api.snapshots.service import SnapshotService, to_schema
from corral_common.web.errors import ERROR_RESPONSES

router = APIRouter(prefix="/v1/snapshots", tags=["snapshots"], responses=ERROR_RESPONSES)
sandbox_router = APIRouter(prefix="/v1/sandboxes", tags=["sandboxes"], responses=ERROR_RESPONSES)

Snapshots = Annotated[SnapshotService, Depends(provide(SnapshotService))]


@sandbox_router.post("/{sandbox_id}/snapshot", status_code=201, response_model=Snapshot, operation_id="snapshot_sandbox")
async def snapshot_sandbox(sandbox_id: str, tenant: Tenant, snapshots: Snapshots, response: Response) -> Snapshot:
    """Save a running VM's memory and disk on its node's disk (it keeps running). Create a
    sandbox with ``from_snapshot`` to restore it. Containers answer 409 ``unsupported_by_backend``."""
    row = await snapshots.create(tenant, sandbox_id)
    response.headers["Location"] = f"/v1/snapshots/{row.id}"
    return to_schema(row)


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
