"""The worker cgroup's control files on the real cgroup v1 hierarchy (root)."""

import subprocess
import uuid

import pytest

from corral_node_agent.cgroups import WorkerCgroup


@pytest.fixture
def cgroup():
    if not WorkerCgroup.available():
        pytest.skip("needs root and cgroup v1 memory, pids and cpuacct")
    group = WorkerCgroup(f"corral-fncall/test-cg-{uuid.uuid4().hex[:8]}/w").create()
    yield group
    group.remove()
    for d in group.dirs.values():
        d.parent.rmdir()


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
