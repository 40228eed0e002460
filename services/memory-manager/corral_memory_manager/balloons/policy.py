"""A VM's balloon target from its guest's stats (pure).

The guest needs what it uses (total − free − page cache) plus a reserve; the rest can go back
to the host. Free page reporting already returns free pages without the balloon (HOST-NOTES:
~280 of 300 MiB in ~3.5 s), so the balloon is a cap that keeps the guest's page cache from
growing back into them, not the main lever. When the guest needs memory (available below
``low_available_mb``, or it swapped in since the last look) the balloon deflates at once, all
the way. With deflate-on-oom the guest also takes pages back by itself under pressure, and QEMU
never re-inflates, so the target is re-sent every pass. A guest that ignores the balloon (actual
does not move towards the target for ``ignored_after`` passes) is left alone for
``backoff_passes``; the host-side pageout of its QEMU (reclaim/) still applies once it idles.
"""

from dataclasses import dataclass, field

from corral_common.contracts.memory import BalloonState


@dataclass(frozen=True)
class BalloonPolicy:
    reserve_mb: float = 64.0  # headroom above what the guest uses
    reserve_fraction: float = 0.10  # ... or this share of its RAM, whichever is more
    floor_fraction: float = 0.25  # never leave the guest less than this share of its RAM
    low_available_mb: float = 48.0
    min_change_mb: float = 32.0  # smaller moves are not worth a guest's work
    stale_after_s: float = 10.0  # stats older than this: no inflating on them
    ignored_after: int = 3
    backoff_passes: int = 12


@dataclass
class BalloonMemory:
    """What the loop remembers of one VM between passes."""

    last_target_mb: float | None = None
    last_actual_mb: float | None = None
    last_swap_in: int | None = None
    unmoved: int = 0  # passes the guest did not move towards the target
    backoff: int = 0


@dataclass(frozen=True)
class BalloonDecision:
    target_mb: float | None  # None: leave the balloon as it is
    why: str
    memory: BalloonMemory = field(default_factory=BalloonMemory)


def decide(state: BalloonState, memory: BalloonMemory, policy: BalloonPolicy, now: float) -> BalloonDecision:
    guest, full = state.guest, float(state.memory_mb)
    nxt = BalloonMemory(last_target_mb=memory.last_target_mb, last_actual_mb=state.actual_mb,
                        last_swap_in=guest.swap_in, unmoved=memory.unmoved, backoff=max(0, memory.backoff - 1))
    swapped_in = (guest.swap_in is not None and memory.last_swap_in is not None
                  and guest.swap_in > memory.last_swap_in)
    needs = (guest.available_mb is not None and guest.available_mb < policy.low_available_mb) or swapped_in
    if needs:
        nxt.last_target_mb, nxt.unmoved = full, 0
        if state.actual_mb < full:
            return BalloonDecision(full, "guest needs memory: deflate", nxt)
        return BalloonDecision(None, "guest needs memory, balloon already empty", nxt)
    if memory.backoff > 0:
        return BalloonDecision(None, "guest ignored the balloon: backing off", nxt)
    if guest.free_mb is None or guest.total_mb is None or not guest.last_update \
            or now - guest.last_update > policy.stale_after_s:
        return BalloonDecision(None, "no fresh guest stats", nxt)
    # Did the guest follow the last target? (it may lag a pass: count passes, not one miss)
    if memory.last_target_mb is not None and memory.last_actual_mb is not None \
            and memory.last_target_mb < memory.last_actual_mb - policy.min_change_mb:
        moved = memory.last_actual_mb - state.actual_mb
        nxt.unmoved = 0 if moved >= policy.min_change_mb / 2 else memory.unmoved + 1
        if nxt.unmoved >= policy.ignored_after:
            nxt.unmoved, nxt.backoff, nxt.last_target_mb = 0, policy.backoff_passes, full
            return BalloonDecision(full, "guest ignores the balloon: deflated, backing off", nxt)
    used = guest.total_mb - guest.free_mb - (guest.disk_caches_mb or 0.0)
    reserve = max(policy.reserve_mb, policy.reserve_fraction * full)
    target = min(full, max(policy.floor_fraction * full, used + reserve))
    nxt.last_target_mb = target
    if abs(target - state.actual_mb) < policy.min_change_mb:
        return BalloonDecision(None, "within min_change of the target", nxt)
    return BalloonDecision(target, "inflate" if target < state.actual_mb else "deflate to target", nxt)


def guest_cache_reclaim_due(state: BalloonState, idle_s: float, idle_after_s: float, cache_mb: float) -> bool:
    """An idle guest holding more than ``cache_mb`` of page cache: worth asking it to drop the
    cache and compact, so free page reporting hands the memory to the host (HOST-NOTES: 190 of
    200 MiB back in 1.7 s). Never for a busy guest: its cache may be its working set."""
    caches = state.guest.disk_caches_mb
    return idle_s >= idle_after_s and caches is not None and caches > cache_mb
