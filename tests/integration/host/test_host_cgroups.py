"""A node-created cgroup's control files on the real cgroup v1 hierarchy (root)."""

import subprocess
import uuid

import pytest

from corral_host.cgroups.detect import cgroup_driver


@pytest.fixture
def cgroup():
    driver = cgroup_driver()
    if not driver.available():
        pytest.skip("needs root and cgroup v1 memory, pids and cpuacct")
    parent = driver.cgroup(f"corral-fncall/test-cg-{uuid.uuid4().hex[:8]}")
    group = driver.cgroup(f"{parent.path}/w").create()
    yield group
    parent.remove()
    assert not any(d.exists() for d in group.dirs.values())


def test_pids_sees_a_process_that_joined_right_after_a_read(cgroup):
    """cgroup v1 caches a pid list per open file: re-reading one fd would miss a newcomer,
    and kill_all would leave it running."""
    assert cgroup.pids() == []
    proc = subprocess.Popen(["sleep", "60"])
    try:
        for f in cgroup.procs_files():
            with open(f, "w") as fh:
                fh.write(str(proc.pid))
        assert cgroup.pids() == [proc.pid]
        cgroup.kill_all()
        assert proc.wait(timeout=5) == -9 and cgroup.pids() == []
    finally:
        proc.kill()


def test_limits_are_written_once_and_counters_reset_every_run(cgroup):
    cgroup.prepare(64 * 1024 * 1024, 16)
    limit = cgroup.dirs["memory"] / "memory.limit_in_bytes"
    assert int(limit.read_text()) == 64 * 1024 * 1024
    assert (cgroup.dirs["pids"] / "pids.max").read_text().strip() == "16"
    cgroup.prepare(32 * 1024 * 1024, 8)
    assert int(limit.read_text()) == 32 * 1024 * 1024
    assert (cgroup.dirs["pids"] / "pids.max").read_text().strip() == "8"
    assert cgroup.stats().cpu_ms == 0.0


def test_a_cpu_limit_lands_where_cpu_shares_cpuacct_s_hierarchy(cgroup):
    """(This host mounts cpu apart from cpuacct: there a cpu cap is refused, not half applied.)"""
    if "cpu" not in cgroup.driver.joined:
        with pytest.raises(OSError, match="cpu controller"):
            cgroup.set_limits(64 * 1024 * 1024, 16, cpu=0.5)
        assert len(cgroup.procs_files()) == 3  # memory, pids, cpuacct: no extra attach per run
        return
    cgroup.set_limits(64 * 1024 * 1024, 16, cpu=0.5)
    quota = cgroup.dirs["cpu"] / "cpu.cfs_quota_us"
    assert quota.read_text().strip() == "50000"
    assert (cgroup.dirs["cpu"] / "cpu.cfs_period_us").read_text().strip() == "100000"
    cgroup.set_limits(64 * 1024 * 1024, 16)
    assert quota.read_text().strip() == "-1"  # lifted again


def _run_in(cgroup, script: str) -> subprocess.CompletedProcess:
    """Run ``script`` with sh in ``cgroup`` (it joins before anything else runs)."""
    join = " ".join(f'echo $$ > "{f}";' for f in cgroup.procs_files())
    return subprocess.run(["sh", "-c", f"{join} {script}"], capture_output=True, timeout=60)


def test_oom_kill_is_counted_and_reclaim_is_not(cgroup, tmp_path):
    """One answer to "was it OOM-killed?": the oom_kill counter. Filling the limit with page
    cache the kernel reclaims is not an OOM kill."""
    big = tmp_path / "big"
    subprocess.run(["dd", "if=/dev/zero", f"of={big}", "bs=1M", "count=96", "oflag=direct"], check=True,
                   capture_output=True)
    cgroup.prepare(32 * 1024 * 1024, 16)
    assert _run_in(cgroup, f"cat {big} > /dev/null").returncode == 0
    assert cgroup.stats().peak_memory_bytes > 24 * 1024 * 1024  # at the limit
    assert cgroup.oom_kills() == 0 and not cgroup.stats().oom_killed
    assert _run_in(cgroup, "exec python3 -c 'b = b\"x\" * (64 << 20)'").returncode == -9
    stats = cgroup.stats()
    assert stats.oom_kills == 1 and stats.oom_killed
    cgroup.prepare(32 * 1024 * 1024, 16)  # counted per run
    assert cgroup.oom_kills() == 0


def test_remove_kills_the_processes_of_every_child(cgroup):
    child = cgroup.driver.cgroup(f"{cgroup.path}/child").create()
    proc = subprocess.Popen(["sleep", "60"])
    try:
        for f in child.procs_files():
            with open(f, "w") as fh:
                fh.write(str(proc.pid))
        assert cgroup.populated() and not cgroup.pids()
        cgroup.remove()
        assert proc.wait(timeout=5) == -9
        assert not any(d.exists() for d in child.dirs.values())
    finally:
        proc.kill()


def test_freeze_and_thaw(cgroup):
    freezer = cgroup.driver.cgroup(cgroup.path)  # the node creates no freezer cgroup of its own
    freezer.dirs["freezer"].mkdir(parents=True)
    try:
        assert any(freezer.freeze() for _ in range(50))  # an empty cgroup freezes at once
        assert (freezer.dirs["freezer"] / "freezer.state").read_text().strip() == "FROZEN"
        freezer.thaw()
        assert (freezer.dirs["freezer"] / "freezer.state").read_text().strip() == "THAWED"
    finally:
        freezer.close()
