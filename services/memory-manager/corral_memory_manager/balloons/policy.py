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

Hysteresis (the benchmark saw 116 targets in 120 s for 3 VMs, and VM bursts ~35% slower, when
every pass re-derived a target from stats taken mid-burst): a new inflation happens at once only
for an idle guest. A busy guest's balloon is inflated only once ``inflate_after_passes``
consecutive passes asked for it, and then to the highest target they asked for (the most the
guest used in that stretch, plus the reserve). An inflation already under way (the guest still
giving pages back) is simply re-sent. Deflating never waits.
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
    inflate_after_passes: int = 5  # a busy guest's inflation waits for this many agreeing passes


@dataclass
class BalloonMemory:
    """What the loop remembers of one VM between passes."""

    last_target_mb: float | None = None
    last_actual_mb: float | None = None
    last_swap_in: int | None = None
    unmoved: int = 0  # passes the guest did not move towards the target
    backoff: int = 0
    inflate_streak: int = 0  # consecutive passes that asked a busy guest for a new inflation
    inflate_ceiling_mb: float | None = None  # the highest target they asked for


@dataclass(frozen=True)
class BalloonDecision:
    target_mb: float | None  # None: leave the balloon as it is
    why: str
    memory: BalloonMemory = field(default_factory=BalloonMemory)


def decide(state: BalloonState, memory: BalloonMemory, policy: BalloonPolicy, now: float,
           idle: bool = False) -> BalloonDecision:
    """``idle``: the guest has been idle long enough (the reclaim loop's rule) for its stats to
    be what it needs, not a burst's snapshot."""
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
    if abs(target - state.actual_mb) < policy.min_change_mb:
        nxt.last_target_mb = target
        return BalloonDecision(None, "within min_change of the target", nxt)
    if target > state.actual_mb:
        nxt.last_target_mb = target
        return BalloonDecision(target, "deflate to target", nxt)
    return _inflate(state, memory, nxt, policy, target, idle)


def _inflate(state: BalloonState, memory: BalloonMemory, nxt: BalloonMemory, policy: BalloonPolicy,
             target: float, idle: bool) -> BalloonDecision:
    """``target`` is below the guest's RAM now: go, re-send, or wait (hysteresis)."""
    sent = memory.last_target_mb
    # Under way: the last target sent is below what the guest has, the guest has not taken
    # pages back since (its RAM did not grow), and this pass asks for no deeper cut.
    under_way = (sent is not None and sent < state.actual_mb and memory.last_actual_mb is not None
                 and state.actual_mb <= memory.last_actual_mb and target >= sent - policy.min_change_mb)
    if under_way:
        nxt.last_target_mb = max(target, sent)
        return BalloonDecision(nxt.last_target_mb, "inflation under way: re-sent", nxt)
    if idle:
        nxt.last_target_mb = target
        return BalloonDecision(target, "inflate: guest idle", nxt)
    streak = memory.inflate_streak + 1
    ceiling = max(target, memory.inflate_ceiling_mb or target)
    if streak < policy.inflate_after_passes:
        nxt.inflate_streak, nxt.inflate_ceiling_mb = streak, ceiling
        return BalloonDecision(None, f"inflate waits: {streak}/{policy.inflate_after_passes} passes agree", nxt)
    if state.actual_mb - ceiling < policy.min_change_mb:
        nxt.last_target_mb = ceiling
        return BalloonDecision(None, "inflate: the stretch's highest target is within min_change", nxt)
    nxt.last_target_mb = ceiling
    return BalloonDecision(ceiling, f"inflate: {streak} passes agree", nxt)


def guest_cache_reclaim_due(state: BalloonState, idle_s: float, idle_after_s: float, cache_mb: float) -> bool:
    """An idle guest holding more than ``cache_mb`` of page cache: worth asking it to drop the
    cache and compact, so free page reporting hands the memory to the host (HOST-NOTES: 190 of
    200 MiB back in 1.7 s). Never for a busy guest: its cache may be its working set."""
    caches = state.guest.disk_caches_mb
    return idle_s >= idle_after_s and caches is not None and caches > cache_mb
