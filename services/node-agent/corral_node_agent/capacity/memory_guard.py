"""The node's last resort when its sandboxes all wake at once: keep the host out of thrash.

A node's memory cap (its cgroup, capacity/resources.py) is its share of the host less the system
reserve, and it is a backstop: sandboxes that asked for 2 MiB each may together grow to it. When
the host runs short below that cap (the kernel's own memory, page cache the platform's services
need, other agents' nodes, anything outside the sandboxes), nothing in the kernel acts until the
host is thrashing: measured with 2,000 default sandboxes waking together (bench/burst.py
--phases storm), the nodes stayed under their caps while the host's memory pressure stalled
every service for tens of seconds (an agent's loop 35 s) and the scheduler gave a live node
up.

The guard acts first, in a thread of its own (the event loop may be what stalls): when the
host's available memory falls below ``floor``, it lowers the node cgroup's limit to what the
node holds now (plus a little headroom; below half the floor, less a step per check, never
below what the sandboxes requested together). The kernel then reclaims inside the node, and a
sandbox that keeps allocating is OOM-killed inside the node's cgroup: the largest of them, as sandboxes'
processes are first for the OOM killer (isolation/policy.py SANDBOX_OOM_SCORE_ADJ), never the
agent, the platform's services, Redis or RabbitMQ, and never a sandbox that stays within what
it has. While the limit is lowered the heartbeat advertises it (``limit_mb``), so the
scheduler's admission on measured use places nothing new on the node. Once the host has twice
the floor available again the limit goes back to the node's claim.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass

from corral_common.logging import get_logger
from corral_host.cgroups.base import Cgroup

log = get_logger(__name__)

MIB = 1024 * 1024
MEMINFO = "/proc/meminfo"


def mem_available_bytes(path: str = MEMINFO) -> int:
    with open(path) as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"no MemAvailable in {path}")


def default_floor_mb(system_reserved_mb: int) -> int:
    """Half the system reserve: what the OS and the platform keep when the nodes fill their caps
    is the reserve; the guard acts once half of it is gone."""
    return max(256, system_reserved_mb // 2)


@dataclass(frozen=True)
class GuardDecision:
    limit_bytes: int | None  # the node cgroup's limit to write; None: leave it
    why: str


# Below the floor the node keeps what it holds plus this much (so a command in a sandbox that
# stays within what it has still starts); below half the floor it gives back this much per check.
HEADROOM = 32 * MIB
STEP = 64 * MIB


def decide(available: int, usage: int, limit: int, claim: int, floor: int, requested: int = 0) -> GuardDecision:
    """The node cgroup's next limit, from the host's available memory, the node's usage and its
    current limit (``claim`` when not lowered). Below the floor the node stops growing (its
    limit: what it holds plus HEADROOM); below half the floor it shrinks, STEP per check. Never
    below what its sandboxes requested together, never up while the host is short."""
    if available < floor:
        target = usage + HEADROOM if available >= floor // 2 else usage - STEP
        target = min(limit, max(requested, target))
        return GuardDecision(target if target < limit else None, "lower: host below the floor")
    if limit < claim and available >= 2 * floor:
        return GuardDecision(claim, "restore: host above twice the floor")
    return GuardDecision(None, "hold")


class MemoryGuard:
    """Polls the host's available memory every ``interval_s`` in a daemon thread and moves the
    node cgroup's memory limit between its claim and what the node holds (``decide``)."""

    def __init__(self, group: Cgroup, claim_bytes: int, pids: int, floor_bytes: int, *, interval_s: float = 0.25,
                 available: Callable[[], int] = mem_available_bytes, requested: Callable[[], int] = lambda: 0):
        self.group, self.claim, self.pids, self.floor = group, claim_bytes, pids, floor_bytes
        self.interval_s = interval_s
        self.available = available
        self.requested = requested
        self.limit = claim_bytes
        self.lowered = 0  # times the limit was lowered (a metric for the note and the bench)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def limit_mb(self) -> int:
        return self.limit // MIB

    def check(self) -> GuardDecision:
        try:
            requested = self.requested()
        except RuntimeError:  # the registry changed while this thread read it: the next check will
            requested = 0
        decision = decide(self.available(), self.group.memory_usage_bytes(), self.limit, self.claim, self.floor,
                          requested)
        if decision.limit_bytes is None:
            return decision
        try:
            self._write(decision.limit_bytes)
        except OSError as exc:
            # v1 refuses a limit below what it cannot reclaim (EBUSY): the next best is what the
            # node holds now, past which its sandboxes' growth is OOM-killed inside it.
            if decision.limit_bytes >= self.limit:
                log.warning("node.memory_guard_failed", error=str(exc), limit_mb=decision.limit_bytes // MIB)
                return decision
            try:
                self._write(max(decision.limit_bytes, self.group.memory_usage_bytes()))
            except OSError as again:
                log.warning("node.memory_guard_failed", error=str(again), limit_mb=decision.limit_bytes // MIB)
                return decision
        if self.limit < self.claim:
            self.lowered += 1
            log.warning("node.memory_guard_lowered", limit_mb=self.limit_mb, claim_mb=self.claim // MIB,
                        available_mb=self.available() // MIB, floor_mb=self.floor // MIB)
        else:
            log.info("node.memory_guard_restored", limit_mb=self.limit_mb)
        return decision

    def _write(self, limit: int) -> None:
        self.group.set_limits(limit, self.pids)
        self.limit = limit

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="memory-guard", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception:  # a reading that failed once must not end the guard
                log.exception("node.memory_guard_error")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.limit < self.claim:
            try:
                self._write(self.claim)
            except OSError:
                pass


def guard_for(group: Cgroup | None, claim_bytes: int, pids: int, floor_mb: int | None, system_reserved_mb: int,
              requested: Callable[[], int]) -> MemoryGuard | None:
    """The node's guard, started (None: no node cgroup, or ``floor_mb`` 0: off)."""
    if group is None or floor_mb == 0:
        return None
    floor = (default_floor_mb(system_reserved_mb) if floor_mb is None else floor_mb) * MIB
    guard = MemoryGuard(group, claim_bytes, pids, floor, requested=requested)
    guard.start()
    log.info("node.memory_guard_started", floor_mb=floor // MIB, claim_mb=claim_bytes // MIB)
    return guard
