"""Capacity arithmetic: host budget, shares, clamping and what a node advertises."""

import pytest

from corral_common.contracts.sandboxes import MIN_PIDS_REQUEST
from corral_node_agent.capacity.resources import (
    Host,
    Resources,
    default_reserved_memory_mb,
    grant,
    host_budget,
    node_capacity,
    total,
    wanted,
)
from corral_node_agent.fncall.service import worker_tasks
from corral_node_agent.fncall.settings import FncallNodeSettings

# The machine the issue was found on: 2 cores, 24 GB, kernel.pid_max 32768.
HOST = Host(cpus=2.0, memory_mb=24105, tasks=32768)


def test_budget_is_the_host_less_the_system_reserve():
    assert default_reserved_memory_mb(HOST) == 2410  # a tenth of RAM
    assert default_reserved_memory_mb(Host(cpus=1, memory_mb=4000, tasks=32768)) == 1024  # at least 1 GiB
    assert host_budget(HOST, None, 4096) == Resources(cpu=2.0, memory_mb=24105 - 2410, pids=32768 - 4096)
    assert host_budget(HOST, 1000, 0) == Resources(cpu=2.0, memory_mb=23105, pids=32768)
    # A reserve larger than the host leaves nothing, never a negative budget.
    assert host_budget(HOST, 30000, 40000) == Resources(cpu=2.0, memory_mb=0, pids=0)


def test_two_default_agents_no_longer_each_take_the_whole_host():
    """Finding 4: two agents each advertised 0.9 x RAM. With the default share (1.0) the first
    takes the budget and the second gets what is left: nothing."""
    budget = host_budget(HOST, None, 4096)
    first, cut = grant(wanted(budget, 1.0), budget, [])
    assert first == budget and cut == []
    second, cut = grant(wanted(budget, 1.0), budget, [first])
    assert second == Resources(0.0, 0, 0) and cut == ["cpu", "memory_mb", "pids"]
    assert total([first, second]).fits_in(budget)


def test_shares_split_the_host_and_explicit_settings_win():
    budget = host_budget(HOST, None, 4096)
    half = wanted(budget, 0.5)
    assert half == Resources(cpu=1.0, memory_mb=10847, pids=14336)
    a, _ = grant(half, budget, [])
    b, cut = grant(half, budget, [a])
    assert b == half and cut == [] and total([a, b]).fits_in(budget)
    # Explicit amounts override the share one by one; beyond what is left they are clamped.
    explicit = wanted(budget, 0.5, memory_mb=20000, pids=1000)
    assert explicit == Resources(cpu=1.0, memory_mb=20000, pids=1000)
    c, cut = grant(explicit, budget, [a])
    assert c == Resources(cpu=1.0, memory_mb=budget.memory_mb - a.memory_mb, pids=1000) and cut == ["memory_mb"]
    assert total([a, c]).fits_in(budget)


@pytest.mark.parametrize("shares", [[0.5, 0.5], [1 / 3] * 3, [0.7, 0.7, 0.7], [1.0, 0.25]])
def test_claims_never_sum_past_the_budget_whatever_the_settings(shares):
    budget = host_budget(HOST, None, 4096)
    claims: list[Resources] = []
    for share in shares:
        got, _ = grant(wanted(budget, share), budget, claims)
        claims.append(got)
    assert total(claims).fits_in(budget)


def test_advertised_capacity_is_the_claim_times_explicit_ratios():
    claim = Resources(cpu=1.0, memory_mb=10847, pids=14336)
    cap = node_capacity(claim, cpu_overcommit=8, memory_overcommit=1.0, fncall_pids=2112)
    assert (cap.cpu, cap.memory_mb, cap.pids) == (8.0, 10847, 14336 - 2112)
    assert (cap.cgroup_memory_bytes, cap.cgroup_pids) == (10847 << 20, 14336)  # the cgroup caps the claim
    over = node_capacity(claim, cpu_overcommit=1, memory_overcommit=1.5)
    assert (over.cpu, over.memory_mb, over.pids) == (1.0, 16270, 14336)
    assert over.cgroup_memory_bytes == 10847 << 20  # overcommitted memory still stops at the claim
    # A claim smaller than the fncall workers' tasks leaves the sandboxes none (never negative).
    assert node_capacity(Resources(1, 100, 100), cpu_overcommit=8, memory_overcommit=1, fncall_pids=500).pids == 0


def test_fncall_workers_tasks_are_kept_out_of_the_sandboxes_share():
    defaults = FncallNodeSettings()
    # 14 runtimes x 8 workers, but at most 32 runs at once, x 64 tasks, plus python's zygotes (8 each).
    assert worker_tasks(defaults) == 32 * 64 + 8 * 8
    assert worker_tasks(FncallNodeSettings(runtimes="c", pool_max=2, pids_max=32)) == 64
    assert worker_tasks(FncallNodeSettings(runtimes="c,cpp", pool_max=8, max_running=4, pids_max=10)) == 40
    assert worker_tasks(FncallNodeSettings(enabled=False)) == 0


def test_sandbox_count_follows_the_pids_claim_unless_set():
    """No count cap of the agent's own (it was 1,000): what its pids hold at the smallest
    pids request (MIN_PIDS_REQUEST), bounded by the user namespace ranges it can hand out; an
    explicit setting wins."""
    claim = Resources(2, 10_000, 120_000)
    assert node_capacity(claim, cpu_overcommit=8, memory_overcommit=1).max_sandboxes == 120_000 // MIN_PIDS_REQUEST
    assert node_capacity(claim, cpu_overcommit=8, memory_overcommit=1,
                         fncall_pids=20_000).max_sandboxes == 100_000 // MIN_PIDS_REQUEST
    assert node_capacity(claim, cpu_overcommit=8, memory_overcommit=1, id_ranges=9000).max_sandboxes == 9000
    assert node_capacity(claim, cpu_overcommit=8, memory_overcommit=1, max_sandboxes=7).max_sandboxes == 7


def test_the_descriptor_limit_bounds_the_sandbox_count_set_or_derived():
    """Past what RLIMIT_NOFILE holds every start fails EMFILE (the density run: 4,009 per node at
    20,000 descriptors); the node says it is full first."""
    claim = Resources(2, 10_000, 120_000)
    assert node_capacity(claim, cpu_overcommit=8, memory_overcommit=1, open_files_room=3000).max_sandboxes == 3000
    assert node_capacity(claim, cpu_overcommit=8, memory_overcommit=1, max_sandboxes=9000,
                         open_files_room=3000).max_sandboxes == 3000


def test_the_agent_raises_its_descriptor_limit_and_knows_what_it_holds():
    """In a child process (the limit is the process's): a soft limit below the hard one goes up
    to it at least; with CAP_SYS_RESOURCE the hard limit goes up too (to fs.nr_open, at most 2^20)."""
    import subprocess
    import sys

    code = (
        "import os, resource\n"
        "from corral_node_agent.capacity.open_files import raise_open_files_limit, sandboxes_open_files_allow, FDS_PER_SANDBOX\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "new = raise_open_files_limit()\n"
        "assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == new >= hard, (new, hard)\n"
        "cap_eff = int(next(l for l in open('/proc/self/status') if l.startswith('CapEff:')).split()[1], 16)\n"
        "if cap_eff >> 24 & 1:  # CAP_SYS_RESOURCE (root in a container may lack it: this machine)\n"
        "    nr_open = int(open('/proc/sys/fs/nr_open').read())\n"
        "    assert new == max(hard, min(1 << 20, nr_open)), (new, hard, nr_open)\n"
        "assert sandboxes_open_files_allow() == (new - min(4096, new // 4)) // FDS_PER_SANDBOX\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        "assert sandboxes_open_files_allow() == (1024 - 256) // FDS_PER_SANDBOX\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_memory_sampling_stretches_its_interval_to_stay_within_its_share_of_a_core():
    from corral_common.pacing import duty_capped_delay as next_sample_delay

    assert next_sample_delay(1.0, 0.002, 0.02) == 1.0  # 100 sandboxes: every second
    assert next_sample_delay(1.0, 0.25, 0.02) == pytest.approx(12.25)  # 5,000: 2% of a core
    assert next_sample_delay(1.0, 0.25, 0.0) == 1.0  # 0: no stretching
