"""``/v1/reclaim``: what the reclaim loop did, and one pass on demand (internal token)."""

import asyncio

from fastapi import APIRouter, Depends

from corral_common.web.errors import ERROR_RESPONSES, ServiceUnavailable
from corral_common.web.internal import require_internal_token
from corral_memory_manager.deps import Services, ServicesDep

from .schemas import ReclaimEntry, ReclaimStatus

router = APIRouter(prefix="/v1/reclaim", tags=["reclaim"], dependencies=[Depends(require_internal_token)],
                   responses={k: ERROR_RESPONSES[k] for k in (401, 503)})


def _status(services: Services) -> ReclaimStatus:
    service = services.reclaim
    last = service.last_pass
    return ReclaimStatus(
        enabled=services.settings.reclaim_enabled, available=service.available(),
        swap_device=services.swap_device,
        seen=last.seen if last else 0, candidates=last.candidates if last else 0,
        last_pass_seconds=round(last.seconds, 4) if last else 0.0, pressure=last.pressure if last else False,
        recent=[ReclaimEntry(sandbox_id=r.sandbox_id, reason=r.reason, before_bytes=r.before_bytes,
                             after_bytes=r.after_bytes, reclaimed_bytes=r.reclaimed_bytes,
                             seconds=round(r.seconds, 4), at=r.at) for r in service.history[-20:]])


@router.get("", summary="The reclaim loop's last pass and recent reclaims")
def reclaim_status(services: ServicesDep) -> ReclaimStatus:
    return _status(services)


@router.post("/run", summary="Run one reclaim pass now (the same policy: idle and paused sandboxes only)")
async def reclaim_now(services: ServicesDep) -> ReclaimStatus:
    if not services.reclaim.available():
        raise ServiceUnavailable("this host gives the memory-manager no cgroups to reclaim from")
    await asyncio.to_thread(services.reclaim.run_once)
    return _status(services)
