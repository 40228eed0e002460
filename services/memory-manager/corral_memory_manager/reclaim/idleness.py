"""When a sandbox counts as idle (pure: the reclaim loop feeds it what it read).

The first rule was "its cgroup's cpu time did not move at all". A running VM never meets it:
its QEMU ticks every second (TCG timers, the balloon's stats polling), so neither the host-side
pageout of an idle VM nor the in-guest cache drop ever ran (bench/memory.py, docs/memory.md).
A sandbox is now busy at a pass when
- its cpu *rate* over the window since the last reading is above a fraction of a core
  (``cpu_cores`` for containers, whose idle rate is 0; ``vm_cpu_cores`` for VMs, whose idle
  QEMU burns a few % of a core under TCG and ~1% with KVM), or
- the node-agent reports a data-path call (exec, files, ports) in flight, or one that ended
  less than ``idle_s`` ago (``SandboxActivity``).
Idle seconds are the time since the last busy pass, never more than this run has seen: a new
watch starts busy, so a restarted manager watches for ``idle_after_s`` before it acts. Windows
shorter than ``min_window_s`` are not judged (one TCG tick in 10 ms would read as 0.1 core);
their cpu counts towards the next, longer one. Cpu the manager caused itself (a pageout, an
in-guest cache drop) is excused: the window it fell in is skipped.
"""

from dataclasses import dataclass

from corral_common.contracts.memory import SandboxActivity
from corral_common.contracts.sandboxes import VM_BACKENDS

# The kinds whose cpu is QEMU's, vCPUs and all (a higher idle threshold).
VM_KINDS = VM_BACKENDS


@dataclass(frozen=True)
class IdleRule:
    cpu_cores: float = 0.01
    vm_cpu_cores: float = 0.15
    min_window_s: float = 1.0

    def threshold(self, kind: str | None) -> float:
        return self.vm_cpu_cores if kind in VM_KINDS else self.cpu_cores


@dataclass
class IdleWatch:
    cpu_ms: float  # at the start of the current window
    sampled_at: float  # monotonic: the window's start
    busy_at: float  # monotonic: the last pass that found it busy
    excused: bool = False  # the current window holds cpu the manager caused

    @classmethod
    def first(cls, cpu_ms: float, now: float) -> "IdleWatch":
        return cls(cpu_ms, now, now)

    def idle_s(self, now: float) -> float:
        return max(0.0, now - self.busy_at)


def cpu_rate(cpu_ms_before: float, cpu_ms_now: float, window_s: float) -> float:
    """Cores used on average over the window."""
    return max(0.0, cpu_ms_now - cpu_ms_before) / 1000.0 / window_s if window_s > 0 else 0.0


def observe(watch: IdleWatch, cpu_ms: float, now: float, rule: IdleRule, kind: str | None,
            activity: SandboxActivity | None) -> None:
    """Fold one reading into the watch."""
    window = now - watch.sampled_at
    if window >= rule.min_window_s:
        if not watch.excused and cpu_rate(watch.cpu_ms, cpu_ms, window) > rule.threshold(kind):
            watch.busy_at = now
        watch.cpu_ms, watch.sampled_at, watch.excused = cpu_ms, now, False
    if activity is not None:
        if activity.calls_in_flight > 0:
            watch.busy_at = now
        else:
            watch.busy_at = max(watch.busy_at, now - activity.idle_s)
