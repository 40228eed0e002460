"""Notices nodes whose heartbeats stopped and fails the sandboxes they held (``node_lost``).

A node is live while its score in ``nodes`` is recent: its full heartbeat sets it, and so
does its liveness pulse, a thread of its agent that keeps it fresh while the agent's event
loop is busy (node-agent events/pulse.py), so a node is lost when its agent is gone or
wedged, not when its full beat is late.

A heartbeat is old either because its node is gone or because nobody could reach Redis
(restarting, say): then every node's heartbeat is old at once, and reaping them as Redis
comes back would fail every running sandbox. So the reaper only reaps once it has itself
seen Redis without a break (no gap over half the timeout between two answers) for at least
the heartbeat timeout: by then every live node has heartbeated again.
"""

import asyncio
import time

from corral_common import lifecycle
from corral_common.amqp import EventBus
from corral_common.logging import get_logger
from corral_common.sandboxes import FailureReason, SandboxState
from corral_common.state import StateStore

log = get_logger(__name__)


class RedisWatch:
    """How long this process has seen Redis answer without a break."""

    def __init__(self, max_gap_s: float):
        self.max_gap_s = max_gap_s
        self._since: float | None = None
        self._last: float | None = None

    def answered(self, now: float) -> None:
        if self._last is None or now - self._last > self.max_gap_s:
            self._since = now  # the first answer, or the first after a break
        self._last = now

    def steady_for(self, seconds: float, now: float) -> bool:
        return self._since is not None and now - self._since >= seconds


class NodeReaper:
    def __init__(self, store: StateStore, bus: EventBus, heartbeat_timeout_s: float, interval_s: float):
        self.store = store
        self.bus = bus
        self.timeout = heartbeat_timeout_s
        self.interval = interval_s
        self.watch = RedisWatch(max_gap_s=heartbeat_timeout_s / 2)

    async def reap_once(self) -> list[str]:
        lost = await self.store.lost_nodes(self.timeout)
        for node_id in lost:
            await self.reap(node_id)
        return lost

    async def reap(self, node_id: str) -> None:
        """Give the node up: its sandboxes fail ``node_lost``, and its tombstone stays."""
        sandbox_ids = await self.store.node_sandboxes(node_id)
        log.warning("node.lost", node_id=node_id, sandboxes=len(sandbox_ids))
        for sandbox_id in sandbox_ids:
            await lifecycle.transition(self.store, self.bus, sandbox_id, SandboxState.failed,
                                       reason=FailureReason.node_lost.value)
            await self.store.release(sandbox_id)
        await self.store.forget_node(node_id)

    async def run(self) -> None:
        while True:
            try:
                if self.watch.steady_for(self.timeout, time.monotonic()):
                    await self.reap_once()
                else:
                    await self.store.redis.ping()
                self.watch.answered(time.monotonic())
            except Exception:
                log.exception("node.reaper_failed")
            await asyncio.sleep(self.interval)
