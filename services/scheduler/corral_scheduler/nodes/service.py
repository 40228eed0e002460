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

A node whose whole agent process stalls (direct reclaim stops the pulse's thread too) is not
dead: before reaping, the reaper asks its kernel (corral_common/node_liveness.py). A node whose
port still completes a handshake is spared until the wedge budget, counted from its last beat,
has passed; one that refuses or does not answer is reaped at once, as before.
"""

import asyncio
import time

from corral_common import lifecycle
from corral_common.amqp import EventBus
from corral_common.contracts.sandboxes import FailureReason, SandboxState
from corral_common.logging import get_logger
from corral_common.node_liveness import WEDGE_TIMEOUTS, accepts_connections
from corral_common.store.state import StateStore

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
        self.stall_budget_s = WEDGE_TIMEOUTS * heartbeat_timeout_s
        # A handshake is one round trip: a node that needs longer is as good as unreachable.
        self.probe_timeout_s = min(1.0, heartbeat_timeout_s / 4)
        self._spared: set[str] = set()  # stalled nodes given time (logged once per stall)

    async def reap_once(self) -> list[str]:
        """Reap the nodes that are gone; returns them (not the stalled ones spared)."""
        stale = await self.store.stale_nodes(self.timeout)
        alive = await asyncio.gather(*(self._stalled_not_dead(node_id, seen) for node_id, seen in stale))
        self._spared &= {node_id for node_id, _ in stale}
        lost = []
        for (node_id, seen), stalled in zip(stale, alive, strict=True):
            if stalled:
                if node_id not in self._spared:
                    self._spared.add(node_id)
                    log.warning("node.stalled", node_id=node_id, silent_s=round(time.time() - seen, 1),
                                reaped_after_s=self.stall_budget_s)
                continue
            self._spared.discard(node_id)
            silent = time.time() - seen
            await self.reap(node_id, f"node {node_id} sent no heartbeat for {silent:.0f} s (timeout {self.timeout:g} s)"
                                     + (f", past the {self.stall_budget_s:g} s a stalled node is given"
                                        if silent >= self.stall_budget_s else ", and its agent refused connections"))
            lost.append(node_id)
        return lost

    async def _stalled_not_dead(self, node_id: str, last_seen: float) -> bool:
        """Silent, within the wedge budget, and its agent's port still accepts."""
        if time.time() - last_seen >= self.stall_budget_s:
            return False
        node = await self.store.get_node(node_id)
        return node is not None and await accepts_connections(node.url, self.probe_timeout_s)

    async def reap(self, node_id: str, why: str = "") -> None:
        """Give the node up: its sandboxes fail ``node_lost`` (``why`` as their error), and its
        tombstone stays."""
        sandbox_ids = await self.store.node_sandboxes(node_id)
        log.warning("node.lost", node_id=node_id, sandboxes=len(sandbox_ids))
        for sandbox_id in sandbox_ids:
            await lifecycle.transition(self.store, self.bus, sandbox_id, SandboxState.failed,
                                       reason=FailureReason.node_lost.value, error=why or f"node {node_id} was lost")
            await self.store.release(sandbox_id)
        await self.store.forget_node(node_id)

    async def run(self) -> None:
        while True:
            try:
                if self.watch.steady_for(self.timeout, time.monotonic()):
                    await self.reap_once()
                else:
                    await self.store.ping()
                self.watch.answered(time.monotonic())
            except Exception:
                log.exception("node.reaper_failed")
            await asyncio.sleep(self.interval)
