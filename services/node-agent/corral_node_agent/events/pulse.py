"""The node's liveness pulse: a busy event loop must not get a live node declared lost.

The full heartbeat (NodeEvents.heartbeat_forever) runs on the agent's event loop: it registers
again what runs here, then writes the node's capacity and its liveness (its score in the
``nodes`` zset, which the scheduler's reaper reads). A loop kept busy for seconds (a burst of
creates on a node running thousands of sandboxes) makes it late, and past the heartbeat timeout
the reaper gives the node up: every sandbox on it fails ``node_lost`` and the agent then stops
them all. The pulse runs in a thread of its own with a Redis connection of its own, so the loop
cannot starve it, and every heartbeat interval refreshes only the node's score, with ``ZADD XX``:
it never puts back a node that is not there, neither one the reaper forgot (its tombstone must
make the agent stop what it runs, which only the full beat does) nor one Redis lost (the full
beat registers its sandboxes first, so the scheduler never sees the node empty).

The pulse stands in for a late full beat, not a missing one: it beats only while the loop still
ticks (a tiny task on it) and the full beat still succeeds, each within the wedge budget. An
agent wedged beyond it is reaped as before, that much later; a dead process has no pulse.
"""

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable

import redis

from corral_common.logging import get_logger
from corral_common.store.liveness import refresh_node_score
from corral_node_agent import metrics

log = get_logger(__name__)

# Over this window the loop-lag gauge reports the worst lag (a stall that ended between two
# scrapes still shows).
LAG_WINDOW_S = 60.0


class LoopWatch:
    """What the event loop and the full heartbeat last did: written on the loop, read by the
    pulse thread and the metrics scrape. ``tick_s``: how often the loop ticks."""

    def __init__(self, tick_s: float, wedge_budget_s: float, clock: Callable[[], float] = time.monotonic):
        self.tick_s = tick_s
        self.wedge_budget_s = wedge_budget_s
        self.clock = clock
        self._lock = threading.Lock()
        self._last_tick = self._last_beat = clock()
        self._beaten = False
        self._lags: deque[tuple[float, float]] = deque()  # (when, how late the tick came)

    def tick(self) -> float:
        """The loop made progress; returns how late this tick came."""
        with self._lock:
            now = self.clock()
            lag = max(0.0, now - self._last_tick - self.tick_s)
            self._last_tick = now
            self._lags.append((now, lag))
            while self._lags and self._lags[0][0] < now - LAG_WINDOW_S:
                self._lags.popleft()
            return lag

    def beat(self) -> float:
        """A full heartbeat succeeded; returns the time since the previous one (0 for the first)."""
        with self._lock:
            now = self.clock()
            gap = now - self._last_beat if self._beaten else 0.0
            self._last_beat, self._beaten = now, True
            return gap

    def stalled_s(self) -> float:
        """Since the loop last ticked."""
        with self._lock:
            return self.clock() - self._last_tick

    def lag_s(self) -> float:
        """The worst lag of the loop over the last LAG_WINDOW_S, the ongoing stall included."""
        with self._lock:
            now = self.clock()
            ongoing = max(0.0, now - self._last_tick - self.tick_s)
            return max([ongoing, *(lag for when, lag in self._lags if when >= now - LAG_WINDOW_S)])

    def may_pulse(self) -> bool:
        """The loop ticked and the full beat succeeded, both within the wedge budget."""
        with self._lock:
            now = self.clock()
            return now - self._last_tick <= self.wedge_budget_s and now - self._last_beat <= self.wedge_budget_s

    async def tick_forever(self) -> None:
        while True:
            self.tick()
            await asyncio.sleep(self.tick_s)


class LivenessPulse:
    """Refreshes the node's score in ``nodes`` every ``interval_s`` from a daemon thread,
    while ``watch`` allows it. ``start`` on the agent's loop (it starts the loop's ticks too),
    ``stop`` at shutdown."""

    def __init__(self, node_id: str, redis_url: str, watch: LoopWatch, interval_s: float, timeout_s: float):
        self.node_id = node_id
        self.watch = watch
        self.interval_s = interval_s
        # A Redis that does not answer must not hold the thread (nor stop()) for long.
        self.redis = redis.Redis.from_url(redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self.timeout_s = timeout_s
        self.beats = 0  # ZADDs Redis answered (whether or not the node was there)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._ticks: asyncio.Task | None = None
        self._withheld = self._failing = False

    def start(self) -> None:
        self._ticks = asyncio.get_running_loop().create_task(self.watch.tick_forever())
        metrics.EVENT_LOOP_LAG.labels(node=self.node_id).set_function(self.watch.lag_s)
        # A daemon: the pulse never keeps the process alive.
        self._thread = threading.Thread(target=self._run, name=f"liveness-pulse-{self.node_id}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._ticks is not None:
            self._ticks.cancel()
        if self._thread is not None:
            self._thread.join(self.timeout_s + self.interval_s + 1)
        self.redis.close()

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self.beat_once()

    def beat_once(self) -> bool:
        """One pulse; True when Redis took it."""
        if not self.watch.may_pulse():
            if not self._withheld:
                # The reaper gives this node up one heartbeat timeout from now.
                log.error("node.pulse_withheld", node_id=self.node_id, loop_stalled_s=round(self.watch.stalled_s(), 1),
                          wedge_budget_s=self.watch.wedge_budget_s)
                self._withheld = True
            return False
        if self._withheld:
            log.warning("node.pulse_resumed", node_id=self.node_id)
            self._withheld = False
        try:
            # XX: refresh a node that is there, never add one (see the module's docstring).
            refresh_node_score(self.redis, self.node_id)
        except redis.RedisError as exc:
            if not self._failing:  # once per outage: the full beat logs its own failures
                log.warning("node.pulse_failed", node_id=self.node_id, error=str(exc)[:200])
                self._failing = True
            return False
        self._failing = False
        self.beats += 1
        return True
