"""``/v1/host``: this node's memory, and the KSM knobs.

Every route requires header X-Corral-Internal-Token when the internal_token setting is
non-empty (401 otherwise): setting KSM changes the whole host.
"""

from typing import Annotated

from fastapi import APIRouter, Depends

from corral_common.web.errors import ERROR_RESPONSES
from corral_common.web.internal import require_internal_token
from corral_memory_manager.deps import ServicesDep

from .schemas import HostMemory, KsmState, KsmUpdate
from .service import HostMemoryService


async def get_host(services: ServicesDep) -> HostMemoryService:
    return services.host


HostDep = Annotated[HostMemoryService, Depends(get_host)]

router = APIRouter(prefix="/v1/host", tags=["host memory"], dependencies=[Depends(require_internal_token)],
                   responses={k: ERROR_RESPONSES[k] for k in (401, 503)})


@router.get("/memory", summary="Host memory: meminfo, KSM, DAMON availability, swap and zram")
def host_memory(host: HostDep) -> HostMemory:
    return host.snapshot()


@router.post("/ksm", summary="Start/stop KSM and set its scan rate", responses={422: ERROR_RESPONSES[422]})
def set_ksm(update: KsmUpdate, host: HostDep) -> KsmState:
    return host.set_ksm(update)
