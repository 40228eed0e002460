"""Balloon targets from guest stats: inflate to use + reserve (never under the floor), deflate at
once when the guest needs memory, re-send after deflate-on-oom, back off from a guest that
ignores the balloon, nothing on stale stats."""

from corral_common.contracts.memory import BalloonState, GuestMemoryStats
from corral_memory_manager.balloons.policy import BalloonMemory, BalloonPolicy, decide

NOW = 1_000_000.0
POLICY = BalloonPolicy(reserve_mb=64, reserve_fraction=0.10, floor_fraction=0.25, low_available_mb=48,
                       min_change_mb=32, stale_after_s=10, ignored_after=3, backoff_passes=5)


def state(actual=512, free=400, caches=20, available=None, swap_in=0, age=1.0, memory=512):
    return BalloonState(sandbox_id="vm", memory_mb=memory, actual_mb=actual,
                        guest=GuestMemoryStats(total_mb=actual - 20, free_mb=free, disk_caches_mb=caches,
                                               available_mb=free + caches if available is None else available,
                                               swap_in=swap_in, last_update=int(NOW - age)))


def test_a_guest_with_free_memory_gets_its_balloon_raised_to_use_plus_reserve():
    d = decide(state(actual=512, free=400, caches=20), BalloonMemory(), POLICY, NOW, idle=True)
    used = (512 - 20) - 400 - 20  # 72 MiB
    assert d.target_mb == max(0.25 * 512, used + 64)  # 136: above the 128 floor
    assert d.why == "inflate: guest idle"


def test_never_below_the_floor():
    d = decide(state(actual=512, free=480, caches=0), BalloonMemory(), POLICY, NOW, idle=True)
    assert d.target_mb == 128


def test_a_guest_that_needs_memory_is_deflated_at_once_fully():
    d = decide(state(actual=200, free=10, caches=5, available=20), BalloonMemory(last_target_mb=200), POLICY, NOW)
    assert (d.target_mb, d.why) == (512, "guest needs memory: deflate")
    swapping = decide(state(actual=200, free=100, swap_in=7), BalloonMemory(last_swap_in=3), POLICY, NOW)
    assert swapping.target_mb == 512


def test_small_moves_and_stale_stats_change_nothing():
    assert decide(state(actual=150, free=60, caches=0), BalloonMemory(), POLICY, NOW).target_mb is None
    assert decide(state(actual=512, free=400, age=60), BalloonMemory(), POLICY, NOW).target_mb is None


def test_the_target_is_resent_after_the_guest_took_pages_back():
    """deflate-on-oom: the guest grew back to 400 MiB on its own, QEMU never re-inflates. Once
    idle it gets the balloon again; while busy that is a new inflation, which waits."""
    memory = BalloonMemory(last_target_mb=136, last_actual_mb=136)
    d = decide(state(actual=400, free=300, caches=10), memory, POLICY, NOW, idle=True)
    assert d.target_mb is not None and d.target_mb < 400
    busy = decide(state(actual=400, free=300, caches=10), memory, POLICY, NOW)
    assert busy.target_mb is None and busy.why.startswith("inflate waits")


def test_a_guest_that_ignores_the_balloon_is_deflated_and_left_alone_for_a_while():
    memory = BalloonMemory()
    for _ in range(4):  # the first pass asks, three more see nothing move
        d = decide(state(actual=512, free=400), memory, POLICY, NOW, idle=True)
        memory = d.memory
    assert d.why == "guest ignores the balloon: deflated, backing off"
    assert d.target_mb == 512
    later = decide(state(actual=512, free=400), d.memory, POLICY, NOW)
    assert later.target_mb is None and later.why.startswith("guest ignored")


def test_ksm_is_wanted_for_many_vms_of_one_image_only():
    from corral_memory_manager.balloons.ksm import ksm_wanted

    assert ksm_wanted(["debian", "debian", "debian", "alpine"], 3)
    assert not ksm_wanted(["debian", "debian", "alpine", "alpine"], 3)
    assert not ksm_wanted([], 3) and not ksm_wanted(["", "", ""], 3)


def test_ksm_policy_starts_the_scanner_and_stops_only_what_it_started(tmp_path):
    from corral_memory_manager.balloons.ksm import KsmPolicy
    from corral_memory_manager.host.service import HostMemoryService

    ksm = tmp_path / "sys/kernel/mm/ksm"
    ksm.mkdir(parents=True)
    for name, value in {"run": 0, "pages_to_scan": 100, "sleep_millisecs": 20, "pages_shared": 0,
                        "pages_sharing": 0, "pages_unshared": 0, "full_scans": 0}.items():
        (ksm / name).write_text(f"{value}\n")
    policy = KsmPolicy(HostMemoryService("n1", str(tmp_path / "proc"), str(tmp_path / "sys"), page_size=4096),
                       min_same_image=2, pages_to_scan=1000)
    assert policy.apply(["img", "img"]) is True
    assert (ksm / "run").read_text().strip() == "1" and (ksm / "pages_to_scan").read_text().strip() == "1000"
    assert policy.apply(["img", "img"]) is None  # already on
    assert policy.apply(["img"]) is False
    assert (ksm / "run").read_text().strip() == "0" and (ksm / "pages_to_scan").read_text().strip() == "100"
    # A scanner the host runs itself is left on.
    (ksm / "run").write_text("1\n")
    assert policy.apply([]) is None and (ksm / "run").read_text().strip() == "1"


def test_only_an_idle_guest_with_much_page_cache_is_asked_to_drop_it():
    from corral_memory_manager.balloons.policy import guest_cache_reclaim_due

    cached = state(free=100, caches=200)
    assert guest_cache_reclaim_due(cached, idle_s=90, idle_after_s=60, cache_mb=64)
    assert not guest_cache_reclaim_due(cached, idle_s=10, idle_after_s=60, cache_mb=64)  # busy
    assert not guest_cache_reclaim_due(state(caches=20), idle_s=90, idle_after_s=60, cache_mb=64)


# ---- hysteresis: a busy guest's inflation waits for K agreeing passes; deflating never waits

HYST = BalloonPolicy(reserve_mb=64, reserve_fraction=0.10, floor_fraction=0.25, low_available_mb=48,
                     min_change_mb=32, stale_after_s=10, ignored_after=3, backoff_passes=5, inflate_after_passes=3)


def test_a_busy_guest_mid_burst_gets_no_inflations_however_its_stats_swing():
    """The benchmark's oscillation: stats alternate between a burst (little free) and its gap
    (much free) every pass. Before, every gap pass inflated and every burst pass deflated."""
    memory, sets = BalloonMemory(), []
    actual = 512.0
    for i in range(20):
        burst = i % 2 == 0
        d = decide(state(actual=actual, free=40 if burst else 350, caches=10), memory, HYST, NOW)
        memory = d.memory
        if d.target_mb is not None:
            sets.append(d.target_mb)
            actual = d.target_mb
    assert sets == []


def test_k_agreeing_passes_inflate_a_busy_guest_to_the_highest_target_they_asked_for():
    memory, decisions = BalloonMemory(), []
    for free in (300, 350, 400):  # used 182, 132, 82 MiB: targets 246, 196, 146
        d = decide(state(actual=512, free=free, caches=10), memory, HYST, NOW)
        memory = d.memory
        decisions.append(d)
    assert [d.target_mb for d in decisions[:2]] == [None, None]
    assert decisions[1].why == "inflate waits: 2/3 passes agree"
    used_most = (512 - 20) - 300 - 10
    assert decisions[2].target_mb == used_most + 64 and decisions[2].why == "inflate: 3 passes agree"


def test_an_idle_guest_is_inflated_at_once():
    d = decide(state(actual=512, free=400, caches=10), BalloonMemory(), HYST, NOW, idle=True)
    assert d.target_mb == (512 - 20) - 400 - 10 + 64 and d.why == "inflate: guest idle"


def test_deflating_never_waits_and_ends_a_streak():
    memory = decide(state(actual=300, free=200, caches=10), BalloonMemory(), HYST, NOW).memory
    assert memory.inflate_streak == 1
    # The guest needs more than it has (used 275 + 64 reserve > 300): up at once.
    d = decide(state(actual=300, free=0, caches=5, available=100), memory, HYST, NOW)
    assert d.why == "deflate to target" and d.target_mb > 300 and d.memory.inflate_streak == 0
    low = decide(state(actual=300, free=10, caches=5, available=20), memory, HYST, NOW)
    assert low.target_mb == 512  # and under pressure fully


def test_an_inflation_under_way_is_resent_without_waiting():
    """Sent 146; the guest is at 400 and still going down: re-send, no new streak."""
    memory = BalloonMemory(last_target_mb=146, last_actual_mb=450)
    d = decide(state(actual=400, free=290, caches=10), memory, HYST, NOW)
    assert d.why == "inflation under way: re-sent" and d.target_mb == 146
    # Had it taken pages back (450 -> 480), it is a new inflation, which waits.
    grown = decide(state(actual=480, free=370, caches=10), memory, HYST, NOW)
    assert grown.target_mb is None and grown.why.startswith("inflate waits")
