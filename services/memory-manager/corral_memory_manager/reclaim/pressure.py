"""Pressure-driven reclaim: reclaim idle sandboxes sooner when the host runs short, before the
kernel's OOM killer has to act (pure rule + the two host readings it needs).

The loop is idle-driven: a sandbox gives memory back after ``idle_after_s`` of idleness,
whatever the node's state. Under pressure that is too slow. Pressure means host MemAvailable
below ``available_mb``, or the PSI ``some avg10`` of /proc/pressure/memory (the share of the
last 10 s in which some task stalled on memory) above ``psi_some_avg10``. Then sandboxes idle for
``idle_after_s`` of this rule (shorter) are due, and the regrow/cooldown hysteresis is kept.
Active sandboxes are still never touched: under pressure the lever is who counts as cold, not
taking memory from a running workload. Both thresholds 0: off.
"""

from dataclasses import dataclass, replace
from pathlib import Path

from corral_memory_manager.host.service import parse_meminfo
from corral_memory_manager.reclaim.policy import ReclaimPolicy

MIB = 1 << 20


@dataclass(frozen=True)
class PressureRule:
    available_mb: float = 0.0  # MemAvailable below this: pressure (0: not judged)
    psi_some_avg10: float = 0.0  # PSI some avg10 (%) above this: pressure (0: not judged)
    idle_after_s: float = 10.0  # under pressure, idle this long is enough

    @property
    def enabled(self) -> bool:
        return self.available_mb > 0 or self.psi_some_avg10 > 0


@dataclass(frozen=True)
class HostPressure:
    available_mb: float | None
    psi_some_avg10: float | None


def under_pressure(reading: HostPressure, rule: PressureRule) -> bool:
    if rule.available_mb > 0 and reading.available_mb is not None and reading.available_mb < rule.available_mb:
        return True
    return (rule.psi_some_avg10 > 0 and reading.psi_some_avg10 is not None
            and reading.psi_some_avg10 > rule.psi_some_avg10)


def effective_policy(policy: ReclaimPolicy, pressed: bool, rule: PressureRule) -> ReclaimPolicy:
    if not pressed or rule.idle_after_s >= policy.idle_after_s:
        return policy
    return replace(policy, idle_after_s=rule.idle_after_s)


def parse_psi_some_avg10(text: str) -> float | None:
    """``some avg10=1.23 avg60=... total=...`` → 1.23."""
    for line in text.splitlines():
        kind, _, fields = line.partition(" ")
        if kind == "some":
            for field in fields.split():
                key, _, value = field.partition("=")
                if key == "avg10":
                    return float(value)
    return None


def read_host_pressure(proc_root: str = "/proc") -> HostPressure:
    """MemAvailable and PSI; None for what this kernel does not have (PSI needs CONFIG_PSI)."""
    proc = Path(proc_root)
    try:
        info = parse_meminfo((proc / "meminfo").read_text())
        available = info.get("MemAvailable", info.get("MemFree"))
        available_mb = None if available is None else available / MIB
    except OSError:
        available_mb = None
    try:
        psi = parse_psi_some_avg10((proc / "pressure/memory").read_text())
    except (OSError, ValueError):
        psi = None
    return HostPressure(available_mb, psi)
