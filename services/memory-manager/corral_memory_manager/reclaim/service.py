"""The reclaim loop: scan the node's sandbox cgroups, page out the idle and paused ones' memory.

It reads the same cgroups the node-agent creates (``/corral/<node>/<sandbox>``, through the
node-agent's cgroup drivers) and writes nothing to them: MADV_PAGEOUT on their processes
(pageout.py). Which sandboxes are idle (idleness.py) also takes the node-agent's data-path
activity (``activity``: its ``GET /v1/activity``, which also says which sandboxes are VMs);
without it (unreachable, or none given) the cpu rate alone decides, with the container
threshold. A restart of this service leaves every sandbox exactly as it was; the new run starts
by watching (a sandbox must look idle for ``idle_after_s`` under its own eyes first).
"""

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx

from corral_common.contracts.memory import SandboxActivity
from corral_common.logging import get_logger
from corral_common.pacing import duty_capped_delay
from corral_common.web.errors import CorralError
from corral_host.cgroups.base import Cgroup, CgroupDriver
from corral_host.cgroups.detect import cgroup_driver
from corral_host.cgroups.node import node_cgroup_path, sandbox_cgroup_path
from corral_memory_manager import metrics
from corral_memory_manager.reclaim import pageout
from corral_memory_manager.reclaim.idleness import VM_KINDS, IdleRule, IdleWatch, observe
from corral_memory_manager.reclaim.policy import ReclaimPolicy, SandboxMemoryView, order
from corral_memory_manager.reclaim.pressure import (
    HostPressure,
    PressureRule,
    effective_policy,
    read_host_pressure,
    under_pressure,
)

log = get_logger(__name__)


@dataclass
class ReclaimRecord:
    sandbox_id: str
    reason: str  # paused | idle
    before_bytes: int
    after_bytes: int
    seconds: float
    at: float  # wall clock

    @property
    def reclaimed_bytes(self) -> int:
        return max(0, self.before_bytes - self.after_bytes)


@dataclass
class _Watch:
    idle: IdleWatch
    after_bytes: int | None = None  # working set right after our last reclaim
    reclaimed_at: float | None = None


@dataclass
class PassReport:
    seen: int = 0
    candidates: int = 0
    reclaimed: list[ReclaimRecord] = field(default_factory=list)
    seconds: float = 0.0
    pressure: bool = False  # the host ran short: sandboxes idle for the pressure rule's time were due


class ReclaimService:
    def __init__(self, node_id: str, policy: ReclaimPolicy, driver: CgroupDriver | None = None,
                 clock: Callable[[], float] = time.monotonic, idle_rule: IdleRule | None = None,
                 activity: Callable[[], list[SandboxActivity] | None] | None = None,
                 pressure_rule: PressureRule | None = None,
                 host_pressure: Callable[[], HostPressure] = read_host_pressure) -> None:
        """``activity()``: the node-agent's data-path activity of its sandboxes, None when it
        cannot be had this pass (blocking: it is called from the pass's thread).
        ``pressure_rule``: reclaim sooner when the host runs short (pressure.py; None: off)."""
        self.node_id, self.policy, self.clock = node_id, policy, clock
        self.pressure_rule, self.host_pressure = pressure_rule or PressureRule(), host_pressure
        self.idle_rule = idle_rule or IdleRule()
        self.activity = activity
        self.driver = driver or cgroup_driver()
        self._watch: dict[str, _Watch] = {}
        self._kinds: dict[str, str] = {}  # sandbox -> backend kind, as the node-agent last said
        self._housekeeping: dict[str, int] = {}  # sandbox -> manager's own calls running in it
        self._activity_ok = True
        self._cgroups: dict[str, Cgroup] = {}
        # sandbox -> its cgroup's name, where they differ (a sandbox claimed from the node's warm
        # pool keeps the name it was started ahead with), as the node-agent last said
        self._cgroup_names: dict[str, str] = {}
        self.history: list[ReclaimRecord] = []  # the last 100, newest last
        self.last_pass: PassReport | None = None
        self._pass_lock = threading.Lock()  # the loop's pass and an on-demand one never overlap

    def available(self) -> bool:
        return self.driver.available()

    def _cgroup(self, sandbox_id: str) -> Cgroup:
        cg = self._cgroups.get(sandbox_id)
        if cg is None:
            name = self._cgroup_names.get(sandbox_id, sandbox_id)
            cg = self._cgroups[sandbox_id] = self.driver.cgroup(sandbox_cgroup_path(self.node_id, name))
        return cg

    def idle_seconds(self, sandbox_id: str) -> float:
        """How long the sandbox has looked idle to this run (idleness.py; 0: unseen or busy)."""
        watch = self._watch.get(sandbox_id)
        return 0.0 if watch is None else watch.idle.idle_s(self.clock())

    def is_vm(self, sandbox_id: str) -> bool:
        return self._kinds.get(sandbox_id) in VM_KINDS

    @contextmanager
    def housekeeping(self, sandbox_id: str) -> Iterator[None]:
        """Wrap the manager's own work inside a sandbox (the in-guest cache drop): the cpu it
        costs there is not the sandbox waking up."""
        self._housekeeping[sandbox_id] = self._housekeeping.get(sandbox_id, 0) + 1
        try:
            yield
        finally:
            left = self._housekeeping[sandbox_id] - 1
            if left:
                self._housekeeping[sandbox_id] = left
            else:
                self._housekeeping.pop(sandbox_id, None)
            watch = self._watch.get(sandbox_id)
            if watch is not None:
                watch.idle.excused = True

    def _activities(self) -> dict[str, SandboxActivity]:
        if self.activity is None:
            return {}
        try:
            found = self.activity()
        except (OSError, CorralError, httpx.HTTPError, ValueError) as exc:  # the cpu rate alone decides this pass
            if self._activity_ok:  # logged once per outage, not every pass
                log.warning("memory.activity_unavailable", node_id=self.node_id, error=str(exc))
            self._activity_ok = False
            return {}
        if not self._activity_ok:
            log.info("memory.activity_available", node_id=self.node_id)
        self._activity_ok = True
        if found is None:
            return {}
        by_id = {a.sandbox_id: a for a in found}
        self._kinds = {sid: a.kind for sid, a in by_id.items()}
        self._cgroup_names = {sid: a.cgroup for sid, a in by_id.items() if a.cgroup}
        return by_id

    def sandbox_ids(self) -> list[str]:
        # "_fncall-*" are the fncall workers' cgroups: never a sandbox, always busy or empty.
        names = self.driver.cgroup(node_cgroup_path(self.node_id)).child_names()
        sandbox_of = {name: sid for sid, name in self._cgroup_names.items()}
        return [sandbox_of.get(n, n) for n in names if not n.startswith("_")]

    def views(self) -> list[SandboxMemoryView]:
        activities = self._activities()
        views, seen = [], set()
        for sandbox_id in self.sandbox_ids():
            cg = self._cgroup(sandbox_id)
            try:
                reading, cpu = cg.memory_reading(), cg.cpu_ms()
            except OSError:  # removed meanwhile
                continue
            now = self.clock()
            seen.add(sandbox_id)
            kind = self._kinds.get(sandbox_id)
            watch = self._watch.get(sandbox_id)
            if watch is None:
                watch = self._watch[sandbox_id] = _Watch(IdleWatch.first(cpu, now))
            else:
                if self._housekeeping.get(sandbox_id):
                    watch.idle.excused = True
                observe(watch.idle, cpu, now, self.idle_rule, kind, activities.get(sandbox_id))
            views.append(SandboxMemoryView(
                sandbox_id, reading.working_set_bytes, cg.is_frozen(), idle_s=watch.idle.idle_s(now),
                working_set_after_reclaim=watch.after_bytes,
                since_reclaim_s=None if watch.reclaimed_at is None else now - watch.reclaimed_at,
                vm=kind in VM_KINDS))
        for gone in [s for s in self._watch if s not in seen]:
            self._watch.pop(gone, None)
            self._kinds.pop(gone, None)
            cg = self._cgroups.pop(gone, None)
            if cg is not None:
                cg.close()
        return views

    def reclaim(self, view: SandboxMemoryView) -> ReclaimRecord:
        """Page out everything the sandbox's processes map. Its cpu time moves a little while
        the kernel works on its pages: that is not the sandbox waking up, so the idle clock is
        not restarted by it."""
        cg = self._cgroup(view.sandbox_id)
        started, before = time.perf_counter(), view.working_set_bytes
        for pid in cg.pids():
            # A VM keeps its code (QEMU's own, TCG's translated blocks): paging it out saves
            # little and makes the next exec in the guest slow.
            pageout.page_out(pid, keep_code=view.vm)
        # cgroup v2 also reclaims page cache nobody maps (v1 has no such file: pageout only).
        cg.reclaim(before)
        try:
            after = cg.memory_reading().working_set_bytes
            cpu = cg.cpu_ms()
        except OSError:
            after, cpu = before, None
        now = self.clock()
        watch = self._watch.get(view.sandbox_id)
        if watch is not None:
            watch.after_bytes, watch.reclaimed_at = after, now
            if cpu is not None:  # a new window starts after the pageout's own cpu
                watch.idle.cpu_ms, watch.idle.sampled_at = cpu, now
        reason = "paused" if view.frozen else "idle" if view.idle_s >= self.policy.idle_after_s else "pressure"
        record = ReclaimRecord(view.sandbox_id, reason, before, after,
                               time.perf_counter() - started, time.time())
        metrics.RECLAIMS.labels(self.node_id, record.reason).inc()
        metrics.RECLAIMED_BYTES.labels(self.node_id).inc(record.reclaimed_bytes)
        metrics.RECLAIM_SECONDS.labels(self.node_id).observe(record.seconds)
        log.info("memory.reclaimed", sandbox_id=view.sandbox_id, reason=record.reason, before=before, after=after,
                 seconds=round(record.seconds, 3))
        self.history = [*self.history[-99:], record]
        return record

    def run_once(self) -> PassReport:
        """One pass (blocking: run it in a thread)."""
        with self._pass_lock:
            return self._run_once()

    def _run_once(self) -> PassReport:
        started = time.perf_counter()
        views = self.views()
        pressed = self.pressure_rule.enabled and under_pressure(self.host_pressure(), self.pressure_rule)
        chosen = order(views, effective_policy(self.policy, pressed, self.pressure_rule))
        report = PassReport(seen=len(views), candidates=len(chosen), pressure=pressed)
        for view in chosen:
            report.reclaimed.append(self.reclaim(view))
        report.seconds = time.perf_counter() - started
        metrics.PASS_SECONDS.labels(self.node_id).set(report.seconds)
        metrics.CANDIDATES.labels(self.node_id).set(len(chosen))
        self.last_pass = report
        return report

    async def run_forever(self, interval_s: float, max_duty: float = 0.0) -> None:
        """A pass every ``interval_s``, stretched so that passes take at most ``max_duty`` of a
        core (the density run's 5,000 sandboxes on one node kept this loop at 16% of a core)."""
        while True:
            started = time.perf_counter()
            try:
                await asyncio.to_thread(self.run_once)
            except Exception:
                log.exception("memory.reclaim_pass_failed", node_id=self.node_id)
            await asyncio.sleep(duty_capped_delay(interval_s, time.perf_counter() - started, max_duty))
