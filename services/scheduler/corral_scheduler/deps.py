"""The scheduler's objects, built once in its lifespan (corral_scheduler.app) into one typed
container on ``app.state.services``; routes take it as ``ServicesDep``."""

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from corral_common.store.state import StateStore
from corral_scheduler.jobs.service import JobAdmitter
from corral_scheduler.metrics import SchedulerGauges
from corral_scheduler.placement.service import Placer
from corral_scheduler.settings import SchedulerSettings


@dataclass
class Services:
    settings: SchedulerSettings
    store: StateStore
    placer: Placer
    admitter: JobAdmitter
    gauges: SchedulerGauges


async def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]
