"""Start and stop of the memory-manager's loops: the zram swap (when asked for), reclaim, balloons."""

import asyncio
from contextlib import asynccontextmanager

from fastapi import FastAPI

from corral_common.logging import get_logger
from corral_memory_manager.balloons.ksm import KsmPolicy
from corral_memory_manager.balloons.service import BalloonService
from corral_memory_manager.reclaim.activity import NodeAgentActivity
from corral_memory_manager.reclaim.pressure import read_host_pressure
from corral_memory_manager.reclaim.service import ReclaimService
from corral_memory_manager.reclaim.zram import ensure_zram_swap

log = get_logger(__name__)


@asynccontextmanager
async def reclaim_lifespan(app: FastAPI, settings):
    activity = NodeAgentActivity(settings.node_agent_url, settings.internal_token or "")
    service = app.state.reclaim = ReclaimService(settings.node_id, settings.reclaim_policy(),
                                                 idle_rule=settings.idle_rule(), activity=activity,
                                                 pressure_rule=settings.pressure_rule(),
                                                 host_pressure=lambda: read_host_pressure(settings.proc_root))
    app.state.swap_device = None
    if settings.zram_swap_mb:
        try:
            swap = await asyncio.to_thread(ensure_zram_swap, settings.zram_swap_mb << 20, settings.zram_algorithm,
                                           sys_root=settings.sys_root)
            app.state.swap_device = swap.device
        except Exception:  # the node runs on without swap: reclaim then drops clean pages only
            log.exception("zram.setup_failed", size_mb=settings.zram_swap_mb)
    loops = []
    if settings.reclaim_enabled and service.available():
        loops.append(asyncio.create_task(service.run_forever(settings.reclaim_interval_s, settings.reclaim_max_duty)))
    ksm = (KsmPolicy(app.state.host, settings.ksm_min_same_image, settings.ksm_pages_to_scan)
           if settings.ksm_policy_enabled else None)
    balloons = app.state.balloons = BalloonService(settings.node_id, settings.node_agent_url,
                                                   settings.internal_token or "", settings.balloon_policy(),
                                                   service.sandbox_ids, ksm=ksm, idle_seconds=service.idle_seconds,
                                                   idle_after_s=settings.reclaim_idle_after_s,
                                                   guest_cache_mb=settings.guest_cache_reclaim_mb or None,
                                                   housekeeping=service.housekeeping)
    if settings.balloon_enabled and service.available():
        loops.append(asyncio.create_task(balloons.run_forever(settings.balloon_interval_s)))
    try:
        yield
    finally:
        for loop in loops:
            loop.cancel()
        await balloons.aclose()
        activity.close()
