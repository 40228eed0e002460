"""``/v1/balloons``: each VM's last balloon reading and the target the loop chose (internal token)."""

from fastapi import APIRouter, Depends, Request

from corral_common.errors import ERROR_RESPONSES
from corral_common.internal import require_internal_token

router = APIRouter(prefix="/v1/balloons", tags=["balloons"], dependencies=[Depends(require_internal_token)],
                   responses={401: ERROR_RESPONSES[401]})


@router.get("", summary="Each VM's balloon as last read, and the target chosen for it")
def balloons(request: Request) -> dict[str, dict]:
    service = getattr(request.app.state, "balloons", None)
    return dict(service.last) if service is not None else {}


@router.post("/run", summary="One balloon pass now")
async def balloons_now(request: Request) -> dict[str, dict]:
    service = request.app.state.balloons
    await service.run_once()
    return dict(service.last)
