"""Notices nodes whose heartbeats stopped and fails the sandboxes they held (``node_lost``)."""

import asyncio

from corral_common import lifecycle
from corral_common.amqp import EventBus
from corral_common.logging import get_logger
from corral_common.sandboxes import FailureReason, SandboxState
from corral_common.state import StateStore

log = get_logger(__name__)


class NodeReaper:
    def __init__(self, store: StateStore, bus: EventBus, heartbeat_timeout_s: float, interval_s: float):
        self.store = store
        self.bus = bus
        self.timeout = heartbeat_timeout_s
        self.interval = interval_s

    async def reap_once(self) -> list[str]:
        lost = await self.store.lost_nodes(self.timeout)
        for node_id in lost:
            sandbox_ids = await self.store.node_sandboxes(node_id)
            log.warning("node.lost", node_id=node_id, sandboxes=len(sandbox_ids))
            for sandbox_id in sandbox_ids:
                await lifecycle.transition(self.store, self.bus, sandbox_id, SandboxState.failed,
                                           reason=FailureReason.node_lost.value)
                await self.store.release(sandbox_id)
            await self.store.forget_node(node_id)
        return lost

    async def run(self) -> None:
        while True:
            try:
                await self.reap_once()
            except Exception:
                log.exception("node.reaper_failed")
            await asyncio.sleep(self.interval)
