"""The memory-manager's composition root: its host view, the zram swap (when asked for), and the reclaim
and balloon loops, built into one ``Services`` and started; stopped again on leaving."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from corral_common.logging import get_logger
from corral_memory_manager.balloons.ksm import KsmPolicy
from corral_memory_manager.balloons.service import BalloonService
from corral_memory_manager.deps import Services
from corral_memory_manager.host.service import HostMemoryService
from corral_memory_manager.reclaim.activity import NodeAgentActivity
from corral_memory_manager.reclaim.pressure import read_host_pressure
from corral_memory_manager.reclaim.service import ReclaimService
from corral_memory_manager.reclaim.zram import ensure_zram_swap
from corral_memory_manager.settings import MemoryManagerSettings

log = get_logger(__name__)


@asynccontextmanager
async def build_services(settings: MemoryManagerSettings) -> AsyncIterator[Services]:
    host = HostMemoryService(settings.node_id, settings.proc_root, settings.sys_root)
    activity = NodeAgentActivity(settings.node_agent_url, settings.internal_token or "")
    service = ReclaimService(settings.node_id, settings.reclaim_policy(),
                                                 idle_rule=settings.idle_rule(), activity=activity,
                                                 pressure_rule=settings.pressure_rule(),
                                                 host_pressure=lambda: read_host_pressure(settings.proc_root))
    swap_device = None
    if settings.zram_swap_mb:
        try:
            swap = await asyncio.to_thread(ensure_zram_swap, settings.zram_swap_mb << 20, settings.zram_algorithm,
                                           sys_root=settings.sys_root)
            swap_device = swap.device
        except Exception:  # the node runs on without swap: reclaim then drops clean pages only
            log.exception("zram.setup_failed", size_mb=settings.zram_swap_mb)
    loops = []
    if settings.reclaim_enabled and service.available():
        loops.append(asyncio.create_task(service.run_forever(settings.reclaim_interval_s, settings.reclaim_max_duty)))
    ksm = (KsmPolicy(host, settings.ksm_min_same_image, settings.ksm_pages_to_scan)
           if settings.ksm_policy_enabled else None)
    balloons = BalloonService(settings.node_id, settings.node_agent_url, settings.internal_token or "",
                              settings.balloon_policy(), service.sandbox_ids, ksm=ksm,
                              idle_seconds=service.idle_seconds, idle_after_s=settings.reclaim_idle_after_s,
                              guest_cache_mb=settings.guest_cache_reclaim_mb or None,
                              housekeeping=service.housekeeping)
    if settings.balloon_enabled and service.available():
        loops.append(asyncio.create_task(balloons.run_forever(settings.balloon_interval_s)))
    try:
        yield Services(settings=settings, host=host, reclaim=service, balloons=balloons, swap_device=swap_device)
    finally:
        for loop in loops:
            loop.cancel()
        if ksm is not None:  # a scanner the manager started does not outlive it
            await asyncio.to_thread(ksm.apply, [])
        await balloons.aclose()
        activity.close()
