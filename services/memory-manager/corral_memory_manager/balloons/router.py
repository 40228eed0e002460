"""``/v1/balloons``: each VM's last balloon reading and the target the loop chose (internal token)."""

from fastapi import APIRouter, Depends

from corral_common.web.errors import ERROR_RESPONSES
from corral_common.web.internal import require_internal_token
from corral_memory_manager.deps import ServicesDep

router = APIRouter(prefix="/v1/balloons", tags=["balloons"], dependencies=[Depends(require_internal_token)],
                   responses={401: ERROR_RESPONSES[401]})


@router.get("", summary="Each VM's balloon as last read, and the target chosen for it")
def balloons(services: ServicesDep) -> dict[str, dict]:
    return dict(services.balloons.last)


@router.post("/run", summary="One balloon pass now")
async def balloons_now(services: ServicesDep) -> dict[str, dict]:
    service = services.balloons
    await service.run_once()
    return dict(service.last)
