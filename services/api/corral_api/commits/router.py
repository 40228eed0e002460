"""POST /v1/sandboxes/{id}/commit and /fork (service.py says what each keeps)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from corral_api.auth.dependencies import Tenant
from corral_api.commits.schemas import CommitRequest, CommitResult
from corral_api.commits.service import CommitService
from corral_api.deps import provide
from corral_api.sandboxes.schemas import Sandbox, SandboxList
from corral_common.web.errors import ERROR_RESPONSES

router = APIRouter(prefix="/v1/sandboxes", tags=["sandboxes"], responses=ERROR_RESPONSES)


Commits = Annotated[CommitService, Depends(provide(CommitService))]


@router.post("/{sandbox_id}/commit", status_code=201, response_model=CommitResult, operation_id="commit_sandbox")
async def commit_sandbox(sandbox_id: str, tenant: Tenant, commits: Commits,
                         body: CommitRequest | None = None) -> CommitResult:
    """Save a running container's writable layer (its changes: new and changed files, deletions
    as whiteouts) as a new ``diff`` layer, and with ``environment`` a new environment that starts
    from it. The sandbox is frozen while its layer is read, then runs on. VMs: 409 (snapshot them)."""
    return await commits.commit(tenant, sandbox_id, body or CommitRequest())


@router.post("/{sandbox_id}/fork", status_code=202, response_model=SandboxList, operation_id="fork_sandbox")
async def fork_sandbox(sandbox_id: str, tenant: Tenant, commits: Commits,
                       count: Annotated[int, Query(ge=1, le=64, description="How many sandboxes")] = 1,
                       processes: Annotated[bool, Query(description="Carry running processes (containers: "
                                                                    "409 criu_unavailable)")] = False) -> SandboxList:
    """``count`` new sandboxes from this one's current state: containers from a commit of its
    files (labelled ``corral.forked_from``), VMs from a snapshot (memory included)."""
    records = await commits.fork(tenant, sandbox_id, count, processes)
    return SandboxList(items=[Sandbox.from_record(r) for r in records])
