"""Memory accounting of a node: each sandbox's working set sampled every second and integrated.

Why it runs in the node-agent, not the memory-manager: the agent creates and deletes every
sandbox, so an account opens at the first sample and closes with a last one at teardown
(nothing is lost to a race with a separate watcher), and the totals go out with the usage the
agent already reports (``Usage``) and with its heartbeat (``GET /v1/nodes``). The
memory-manager can restart without touching them, and reads the same cgroup files for its own
decisions.

What is sampled is the cgroup, whatever runs in it: a container's processes, a VM's QEMU (its
guest RAM as RSS plus host page cache it caused), and, in the node cgroup's total, the fncall
workers. Two reads of kept descriptors per sandbox (``Cgroup.memory_reading``).

memory·time is the trapezoid integral of the working set (MiB) over seconds; the peak is the
highest working set sampled (the kernel's own peak counter, which counts page cache, stays in
``Usage.peak_memory_bytes``).
"""

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from corral_common.logging import get_logger
from corral_common.sandboxes import Usage
from corral_node_agent.cgroups.base import Cgroup, CgroupDriver, MemoryReading
from corral_node_agent.cgroups.node import node_cgroup_path, sandbox_cgroup_path
from corral_node_agent.memory import metrics

log = get_logger(__name__)

MIB = 1024 * 1024
_SANDBOX_GAUGES = (metrics.SANDBOX_WORKING_SET, metrics.SANDBOX_SWAP, metrics.SANDBOX_PEAK,
                   metrics.SANDBOX_MIB_SECONDS)


@dataclass
class MemoryAccount:
    """One cgroup's integral: fed readings in time order."""

    mib_seconds: float = 0.0
    peak_working_set_bytes: int = 0
    working_set_bytes: int = 0
    swap_bytes: int = 0
    sampled_at: float | None = None

    def add(self, reading: MemoryReading, now: float) -> None:
        if self.sampled_at is not None and now > self.sampled_at:
            mean = (self.working_set_bytes + reading.working_set_bytes) / 2
            self.mib_seconds += mean / MIB * (now - self.sampled_at)
        self.sampled_at = now
        self.working_set_bytes = reading.working_set_bytes
        self.swap_bytes = reading.swap_bytes
        self.peak_working_set_bytes = max(self.peak_working_set_bytes, reading.working_set_bytes)

    def into(self, usage: Usage) -> Usage:
        """``usage`` with this account's numbers."""
        return usage.model_copy(update={
            "memory_mib_seconds": round(self.mib_seconds, 3),
            "peak_working_set_bytes": self.peak_working_set_bytes,
            "working_set_bytes": self.working_set_bytes, "swap_bytes": self.swap_bytes})

    def summary(self) -> dict[str, float]:
        return {"working_set_mb": round(self.working_set_bytes / MIB, 1),
                "peak_working_set_mb": round(self.peak_working_set_bytes / MIB, 1),
                "swap_mb": round(self.swap_bytes / MIB, 1), "mib_seconds": round(self.mib_seconds, 1)}


class MemoryAccounting:
    def __init__(self, driver: CgroupDriver, node_id: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.driver, self.node_id, self.clock = driver, node_id, clock
        self.node = MemoryAccount()
        self._node_cgroup: Cgroup | None = None
        self._accounts: dict[str, MemoryAccount] = {}
        self._cgroups: dict[str, Cgroup] = {}
        self._gauges: dict[str, tuple] = {}
        # The sampling thread and the event loop (usage, close_account) share the accounts and
        # the kept descriptors: a descriptor is never closed while the other side reads it.
        self._lock = threading.Lock()

    def _cgroup(self, sandbox_id: str) -> Cgroup:
        cg = self._cgroups.get(sandbox_id)
        if cg is None:
            cg = self._cgroups[sandbox_id] = self.driver.cgroup(sandbox_cgroup_path(self.node_id, sandbox_id))
        return cg

    def _sample_one(self, sandbox_id: str, now: float) -> MemoryAccount | None:
        with self._lock:
            return self._sample_locked(sandbox_id, now)

    def _sample_locked(self, sandbox_id: str, now: float) -> MemoryAccount | None:
        account = self._accounts.get(sandbox_id)
        try:
            reading = self._cgroup(sandbox_id).memory_reading()
        except OSError:  # not created yet (starting) or gone: nothing to add
            return account
        if account is None:
            account = self._accounts[sandbox_id] = MemoryAccount()
        account.add(reading, now)
        gauges = self._gauges.get(sandbox_id)
        if gauges is None:  # .labels() costs as much as the reads: looked up once per sandbox
            gauges = self._gauges[sandbox_id] = tuple(g.labels(self.node_id, sandbox_id) for g in _SANDBOX_GAUGES)
        for gauge, value in zip(gauges, (account.working_set_bytes, account.swap_bytes,
                                         account.peak_working_set_bytes, account.mib_seconds), strict=True):
            gauge.set(value)
        return account

    def sample(self, sandbox_ids: Iterable[str]) -> None:
        """One pass: every running sandbox, then the node cgroup (blocking reads: run it in a
        thread)."""
        started = time.perf_counter()
        now = self.clock()
        for sandbox_id in sandbox_ids:
            self._sample_one(sandbox_id, now)
        if self._node_cgroup is None:
            self._node_cgroup = self.driver.cgroup(node_cgroup_path(self.node_id))
        try:
            self.node.add(self._node_cgroup.memory_reading(), now)
        except OSError:
            pass
        else:
            metrics.NODE_WORKING_SET.labels(self.node_id).set(self.node.working_set_bytes)
            metrics.NODE_SWAP.labels(self.node_id).set(self.node.swap_bytes)
            metrics.NODE_PEAK.labels(self.node_id).set(self.node.peak_working_set_bytes)
            metrics.NODE_MIB_SECONDS.labels(self.node_id).set(self.node.mib_seconds)
        metrics.SAMPLE_SECONDS.labels(self.node_id).set(time.perf_counter() - started)

    def usage(self, sandbox_id: str, usage: Usage) -> Usage:
        """``usage`` with the sandbox's account as of now (a fresh sample: reads are cheap)."""
        account = self._sample_one(sandbox_id, self.clock())
        return account.into(usage) if account is not None else usage

    def close_account(self, sandbox_id: str, usage: Usage) -> Usage:
        """The last word on an ending sandbox (call before its cgroup goes): one last sample,
        its numbers into ``usage``, the account and its metrics dropped."""
        account = self._sample_one(sandbox_id, self.clock())
        self.forget(sandbox_id)
        return account.into(usage) if account is not None else usage

    def forget(self, sandbox_id: str) -> None:
        with self._lock:
            self._accounts.pop(sandbox_id, None)
            cg = self._cgroups.pop(sandbox_id, None)
            if cg is not None:
                cg.close()
            self._gauges.pop(sandbox_id, None)
        for gauge in _SANDBOX_GAUGES:
            try:
                gauge.remove(self.node_id, sandbox_id)
            except KeyError:
                pass

    def account(self, sandbox_id: str) -> MemoryAccount | None:
        return self._accounts.get(sandbox_id)

    def prune(self, live: set[str]) -> None:
        """Drop accounts of sandboxes that are gone without passing close_account."""
        for sandbox_id in [s for s in list(self._accounts) if s not in live]:
            self.forget(sandbox_id)


async def sample_memory_forever(manager, interval_s: float) -> None:
    """The agent's sampling loop: ``manager.sample_memory()`` in a worker thread every
    ``interval_s`` (a failing pass is logged and the next one runs)."""
    while True:
        try:
            await asyncio.to_thread(manager.sample_memory)
        except Exception:
            log.exception("memory.sample_failed")
        await asyncio.sleep(interval_s)
