"""The reclaim policy: who is a candidate (never an active sandbox), the order (paused, then
longest idle, then biggest), the per-pass budget and the hysteresis after a reclaim."""

from corral_memory_manager.reclaim.pageout import mapped_ranges
from corral_memory_manager.reclaim.policy import ReclaimPolicy, SandboxMemoryView, due, order

MIB = 1 << 20
POLICY = ReclaimPolicy(idle_after_s=30, min_bytes=8 * MIB, regrow_bytes=16 * MIB, cooldown_s=300,
                       max_bytes_per_pass=1024 * MIB)


def view(sid, ws_mib=100, frozen=False, idle_s=60.0, after_mib=None, since=None):
    return SandboxMemoryView(sid, ws_mib * MIB, frozen, idle_s,
                             None if after_mib is None else after_mib * MIB, since)


def test_an_active_sandbox_is_never_a_candidate_however_big():
    assert not due(view("busy", ws_mib=10_000, idle_s=1), POLICY)
    assert due(view("idle", idle_s=30), POLICY)
    assert due(view("paused-now", frozen=True, idle_s=0), POLICY)  # paused counts at once


def test_too_little_to_reclaim_is_skipped():
    assert not due(view("small", ws_mib=4), POLICY)


def test_paused_first_then_longest_idle_then_biggest():
    views = [view("idle-short-big", ws_mib=500, idle_s=40), view("paused", ws_mib=10, frozen=True, idle_s=0),
             view("idle-long", ws_mib=50, idle_s=600), view("idle-short-small", ws_mib=20, idle_s=40),
             view("active", idle_s=2)]
    assert [v.sandbox_id for v in order(views, POLICY)] == ["paused", "idle-long", "idle-short-big",
                                                             "idle-short-small"]


def test_a_pass_stops_at_its_byte_budget():
    policy = ReclaimPolicy(idle_after_s=30, max_bytes_per_pass=250 * MIB)
    views = [view(f"sb-{i}", ws_mib=100, idle_s=100 + i) for i in range(5)]
    chosen = order(views, policy)
    assert len(chosen) == 3  # 100 + 100 reach 200 < 250: a third starts, then the budget is spent


def test_hysteresis_a_reclaimed_sandbox_waits_until_it_regrows_or_cools_down():
    assert not due(view("r", ws_mib=30, after_mib=20, since=10), POLICY)  # regrew 10 MiB < 16
    assert due(view("r", ws_mib=40, after_mib=20, since=10), POLICY)  # regrew 20 MiB
    assert due(view("r", ws_mib=30, after_mib=20, since=301), POLICY)  # cooled down


def test_mapped_ranges_skip_the_kernels_own_mappings():
    maps = ("55d0c0000000-55d0c0021000 r--p 00000000 08:01 123 /usr/bin/python3\n"
            "7f0000000000-7f0000100000 rw-p 00000000 00:00 0 \n"
            "7ffd1000000-7ffd1021000 rw-p 00000000 00:00 0 [stack]\n"
            "7ffd11fd000-7ffd1201000 r--p 00000000 00:00 0 [vvar]\n"
            "7ffd1201000-7ffd1203000 r-xp 00000000 00:00 0 [vdso]\n"
            "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]\n")
    assert mapped_ranges(maps) == [(0x55d0c0000000, 0x21000), (0x7f0000000000, 0x100000),
                                   (0x7ffd1000000, 0x21000)]


def test_mapped_ranges_keep_code_for_vms():
    maps = ("55d0c0000000-55d0c0021000 r-xp 00000000 08:01 123 /usr/bin/qemu-system-x86_64\n"
            "7f0000000000-7f0040000000 rw-p 00000000 00:00 0 \n"
            "7f8000000000-7f8040000000 rwxp 00000000 00:00 0 \n"
            "7f9000000000-7f9040000000 rw-s 00000000 00:01 9 /memfd:tcg-jit (deleted)\n")
    assert mapped_ranges(maps, keep_code=True) == [(0x7f0000000000, 0x40000000)]  # guest RAM only
    assert len(mapped_ranges(maps)) == 4
