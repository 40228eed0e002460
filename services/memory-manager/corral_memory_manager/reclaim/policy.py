"""Which sandboxes give memory back, in what order, and how much (pure: no files touched).

A sandbox is a candidate only while nothing in it runs: paused (its cgroup frozen) or idle (no
use for ``idle_after_s``: cpu rate under a threshold and no data-path call, idleness.py). An active sandbox's working set is never
touched, whatever the node's pressure. Paused ones go first (a paused rollout is the coldest
memory there is), then the longest idle, then the biggest. Hysteresis: a sandbox reclaimed
before is left alone until its working set has grown again by ``regrow_bytes`` (what it pulled
back in when touched) or ``cooldown_s`` has passed, so a sandbox that keeps faulting the same
pages in is not paged out over and over. A pass stops at ``max_bytes_per_pass``.

Nothing here can make a sandbox fail: MADV_PAGEOUT (the lever, see pageout.py) never lowers a
limit and never invokes the OOM killer; what cannot be swapped stays resident.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class ReclaimPolicy:
    idle_after_s: float = 30.0
    min_bytes: int = 8 << 20  # less than this reclaimable: not worth the syscalls
    regrow_bytes: int = 16 << 20
    cooldown_s: float = 300.0
    max_bytes_per_pass: int = 1 << 30


@dataclass(frozen=True)
class SandboxMemoryView:
    """What the policy sees of one sandbox at one pass."""

    sandbox_id: str
    working_set_bytes: int
    frozen: bool
    idle_s: float  # seconds it has looked idle (idleness.py)
    # After its last reclaim (None: never reclaimed by this manager run or a previous one).
    working_set_after_reclaim: int | None = None
    since_reclaim_s: float | None = None
    vm: bool = False  # a VM's QEMU: its code mappings stay resident at pageout


def is_active(view: SandboxMemoryView, policy: ReclaimPolicy) -> bool:
    return not view.frozen and view.idle_s < policy.idle_after_s


def due(view: SandboxMemoryView, policy: ReclaimPolicy) -> bool:
    """Idle or paused, with enough to reclaim, and not reclaimed too recently."""
    if is_active(view, policy) or view.working_set_bytes < policy.min_bytes:
        return False
    if view.working_set_after_reclaim is None or view.since_reclaim_s is None:
        return True
    regrown = view.working_set_bytes - view.working_set_after_reclaim
    return regrown >= policy.regrow_bytes or view.since_reclaim_s >= policy.cooldown_s


def order(views: list[SandboxMemoryView], policy: ReclaimPolicy) -> list[SandboxMemoryView]:
    """The sandboxes to reclaim this pass, first first, within the pass's byte budget."""
    candidates = sorted((v for v in views if due(v, policy)),
                        key=lambda v: (not v.frozen, -v.idle_s, -v.working_set_bytes, v.sandbox_id))
    chosen, budget = [], policy.max_bytes_per_pass
    for view in candidates:
        if budget <= 0:
            break
        chosen.append(view)
        budget -= view.working_set_bytes
    return chosen
