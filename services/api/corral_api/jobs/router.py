"""Jobs: up to 32,000 sandboxes of one spec per call, admitted by fair share."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response

from corral_api.auth.dependencies import Tenant
from corral_api.deps import provide
from corral_api.jobs.schemas import Job, JobCreate, JobList
from corral_api.jobs.service import JobService
from corral_common.web.errors import ERROR_RESPONSES

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERROR_RESPONSES)


Service = Annotated[JobService, Depends(provide(JobService))]


@router.post("", status_code=202, response_model=Job, operation_id="create_job")
async def create_job(body: JobCreate, tenant: Tenant, service: Service, response: Response) -> Job:
    """Queue ``count`` sandboxes of ``spec``. Answers at once; the records are created and
    queued in the background, and the scheduler admits them as nodes have room."""
    record = await service.create(tenant, body)
    response.headers["Location"] = f"/v1/jobs/{record.id}"
    return await service.get(tenant, record.id)


@router.get("", response_model=JobList, operation_id="list_jobs")
async def list_jobs(tenant: Tenant, service: Service,
                    include_deleted: Annotated[bool, Query(description="also the deleted jobs")] = False) -> JobList:
    """Your jobs, newest first, with their counts per state."""
    return JobList(items=await service.of_tenant(tenant, include_deleted=include_deleted))


@router.get("/{job_id}", response_model=Job, operation_id="get_job")
async def get_job(job_id: str, tenant: Tenant, service: Service) -> Job:
    """Counts per state, how many are still queued and the job's place in the admission order."""
    return await service.get(tenant, job_id)


@router.delete("/{job_id}", status_code=202, response_model=Job, operation_id="delete_job")
async def delete_job(job_id: str, tenant: Tenant, service: Service) -> Job:
    """Stop queuing and terminate every sandbox of the job (in the background)."""
    return await service.delete(tenant, job_id)
