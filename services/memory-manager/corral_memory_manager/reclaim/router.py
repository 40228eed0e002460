"""``/v1/reclaim``: what the reclaim loop did, and one pass on demand (internal token)."""

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Request

from corral_common.errors import ERROR_RESPONSES, ServiceUnavailable
from corral_common.internal import require_internal_token

from .schemas import ReclaimEntry, ReclaimStatus
from .service import ReclaimService

router = APIRouter(prefix="/v1/reclaim", tags=["reclaim"], dependencies=[Depends(require_internal_token)],
                   responses={k: ERROR_RESPONSES[k] for k in (401, 503)})


async def get_reclaim(request: Request) -> ReclaimService:
    return request.app.state.reclaim


ReclaimDep = Annotated[ReclaimService, Depends(get_reclaim)]


def _status(request: Request, service: ReclaimService) -> ReclaimStatus:
    last = service.last_pass
    return ReclaimStatus(
        enabled=request.app.state.settings.reclaim_enabled, available=service.available(),
        swap_device=getattr(request.app.state, "swap_device", None),
        seen=last.seen if last else 0, candidates=last.candidates if last else 0,
        last_pass_seconds=round(last.seconds, 4) if last else 0.0, pressure=last.pressure if last else False,
        recent=[ReclaimEntry(sandbox_id=r.sandbox_id, reason=r.reason, before_bytes=r.before_bytes,
                             after_bytes=r.after_bytes, reclaimed_bytes=r.reclaimed_bytes,
                             seconds=round(r.seconds, 4), at=r.at) for r in service.history[-20:]])


@router.get("", summary="The reclaim loop's last pass and recent reclaims")
def reclaim_status(request: Request, service: ReclaimDep) -> ReclaimStatus:
    return _status(request, service)


@router.post("/run", summary="Run one reclaim pass now (the same policy: idle and paused sandboxes only)")
async def reclaim_now(request: Request, service: ReclaimDep) -> ReclaimStatus:
    if not service.available():
        raise ServiceUnavailable("this host gives the memory-manager no cgroups to reclaim from")
    await asyncio.to_thread(service.run_once)
    return _status(request, service)
