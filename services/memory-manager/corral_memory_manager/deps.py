"""The memory-manager's objects, built once in its composition root (corral_memory_manager.services)
into one typed container on ``app.state.services``; routes take it as ``ServicesDep``."""

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from corral_memory_manager.balloons.service import BalloonService
from corral_memory_manager.host.service import HostMemoryService
from corral_memory_manager.reclaim.service import ReclaimService
from corral_memory_manager.settings import MemoryManagerSettings


@dataclass
class Services:
    settings: MemoryManagerSettings
    host: HostMemoryService
    reclaim: ReclaimService
    balloons: BalloonService
    # The zram device swap was set up on (None: none asked for, or its setup failed).
    swap_device: str | None


async def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]
