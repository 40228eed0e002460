"""Public rollout endpoints: a sandbox plus a durable, replayable trajectory log."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response

from corral_api.auth.dependencies import Tenant
from corral_api.body_limits import body_limit
from corral_api.deps import provide
from corral_api.rollouts.schemas import (
    Rollout,
    RolloutCreate,
    RolloutFinish,
    RolloutList,
    RolloutStatus,
    Step,
    StepRequest,
)
from corral_api.rollouts.service import RolloutService
from corral_common.web.errors import ERROR_RESPONSES

router = APIRouter(prefix="/v1/rollouts", tags=["rollouts"], responses=ERROR_RESPONSES)


Service = Annotated[RolloutService, Depends(provide(RolloutService))]


@router.post("", status_code=201, response_model=Rollout, operation_id="create_rollout")
async def create_rollout(body: RolloutCreate, tenant: Tenant, service: Service, response: Response,
                         wait: Annotated[bool, Query(description="Answer once the sandbox runs (or failed)")] = True,
                         timeout: Annotated[float, Query(gt=0, le=3600)] = 120.0) -> Rollout:
    """Bind a rollout to a new sandbox (``sandbox``: the spec of POST /v1/sandboxes) or to an
    existing one (``sandbox_id``)."""
    rollout = await service.create(tenant, body, wait=wait, timeout_s=timeout)
    response.headers["Location"] = f"/v1/rollouts/{rollout.id}"
    return rollout


@router.get("", response_model=RolloutList, operation_id="list_rollouts")
async def list_rollouts(tenant: Tenant, service: Service, job_id: str | None = None,
                        status: RolloutStatus | None = None,
                        limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> RolloutList:
    """This tenant's rollouts, oldest first (without their steps)."""
    return RolloutList(items=await service.list(tenant, job_id, status, limit))


@router.get("/{rollout_id}", response_model=Rollout, operation_id="get_rollout")
async def get_rollout(rollout_id: str, tenant: Tenant, service: Service) -> Rollout:
    """The rollout with its whole trajectory: steps, observations, timings, status."""
    return await service.get(tenant, rollout_id)


@router.post("/{rollout_id}/steps", response_model=Step, operation_id="rollout_step",
             openapi_extra=body_limit("max_upload_mb"))  # a step may write a file (content in the JSON)
async def rollout_step(rollout_id: str, body: StepRequest, tenant: Tenant, service: Service) -> Step:
    """Execute step ``index`` and answer its observation once it is committed.

    - ``index`` equal to the rollout's step count: executed (exactly once, even if this
      request is dropped: it runs server-side and is logged).
    - an index already committed with the same request: the logged answer, not executed
      again (``replayed``); one still executing: waits for it.
    - a different request at a committed index: 409 ``step_mismatch``; a gap: 422 ``step_skipped``.

    A step whose action failed is committed too: ``status=failed`` with ``error``. A step
    that was executing when the api stopped is ``interrupted`` (never re-run).
    """
    return await service.step(tenant, rollout_id, body)


@router.post("/{rollout_id}/finish", response_model=Rollout, operation_id="finish_rollout")
async def finish_rollout(rollout_id: str, body: RolloutFinish, tenant: Tenant, service: Service) -> Rollout:
    """Record the outcome and release the sandbox (kept if ``keep_sandbox``)."""
    return await service.finish(tenant, rollout_id, body)
