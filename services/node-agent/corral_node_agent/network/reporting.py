"""Egress refusals as events on the bus: ``sandbox.network.denied``, coalesced per sandbox
(at most one event a second, with the count and the latest refusals), so a sandbox that
hammers a closed port costs the broker one message a second, not one per attempt."""

import asyncio
import time

from corral_common.amqp import EventBus
from corral_common.contracts.events import SANDBOX_NETWORK_DENIED_KEY, NetworkDenial, SandboxNetworkDenied
from corral_common.logging import get_logger

log = get_logger(__name__)
FLUSH_S = 1.0
KEEP = 8


class DenialReporter:
    def __init__(self, bus: EventBus, node_id: str):
        self.bus = bus
        self.node_id = node_id
        self._pending: dict[str, list[NetworkDenial]] = {}
        self._counts: dict[str, int] = {}
        self._task: asyncio.Task | None = None

    def add(self, sandbox_id: str, target: str, reason: str) -> None:
        recent = self._pending.setdefault(sandbox_id, [])
        recent.append(NetworkDenial(at=time.time(), target=target, reason=reason))
        del recent[:-KEEP]
        self._counts[sandbox_id] = self._counts.get(sandbox_id, 0) + 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(FLUSH_S)
        pending, counts = self._pending, self._counts
        self._pending, self._counts = {}, {}
        for sandbox_id, recent in pending.items():
            try:
                await self.bus.publish(SANDBOX_NETWORK_DENIED_KEY, SandboxNetworkDenied(
                    sandbox_id=sandbox_id, node_id=self.node_id, count=counts[sandbox_id], recent=recent),
                    confirm=False)
            except Exception:  # noqa: BLE001 - the broker is away: the counters still have it
                log.warning("egress.denied_not_published", sandbox_id=sandbox_id)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
