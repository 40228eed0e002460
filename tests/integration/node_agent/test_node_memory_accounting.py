"""Memory accounting on the real cgroup v1/v2 hierarchy (root): a sandbox's working set matches
what /proc says its process holds, memory·time integrates it, and a pass over 1,000 sandbox
cgroups stays cheap."""

import subprocess
import sys
import time
import uuid

import pytest

from corral_common.contracts.sandboxes import Usage
from corral_host.cgroups.detect import cgroup_driver
from corral_host.cgroups.node import node_cgroup_path, sandbox_cgroup_path
from corral_node_agent.memory.accounting import MIB, MemoryAccounting

ALLOC_MIB = 96


@pytest.fixture
def node():
    driver = cgroup_driver()
    if not driver.available():
        pytest.skip("needs root and cgroups with memory, pids and cpuacct")
    node_id = f"memtest-{uuid.uuid4().hex[:8]}"
    node_cg = driver.cgroup(node_cgroup_path(node_id)).create()
    yield driver, node_id
    node_cg.remove()
    driver.cgroup("/corral").remove_if_empty()


def _start_in(driver, path: str) -> subprocess.Popen:
    """A python that joins ``path`` first, then allocates and touches ALLOC_MIB of anonymous memory."""
    group = driver.cgroup(path).create()
    joins = "; ".join(f"echo $$ > {f}" for f in group.procs_files())
    code = (f"import sys, time; b = bytearray({ALLOC_MIB} * 1024 * 1024)\n"
            "for i in range(0, len(b), 4096): b[i] = 1\n"
            "print('ready', flush=True); time.sleep(120)")
    proc = subprocess.Popen(["sh", "-c", f"{joins}; exec {sys.executable} -c \"$0\"", code],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _rss_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_working_set_matches_proc_and_memory_time_integrates_it(node):
    driver, node_id = node
    proc = _start_in(driver, sandbox_cgroup_path(node_id, "sb-1"))
    try:
        acc = MemoryAccounting(driver, node_id)
        acc.sample(["sb-1"])
        started = time.monotonic()
        rss = _rss_bytes(proc.pid)
        account = acc.account("sb-1")
        # The cgroup also holds the page tables and kernel objects of the process, /proc's RSS
        # does not: within 10% + 8 MiB.
        assert abs(account.working_set_bytes - rss) < 0.10 * rss + 8 * MIB, (account.working_set_bytes, rss)
        assert account.working_set_bytes >= ALLOC_MIB * MIB
        time.sleep(1.0)  # memory·time needs time to pass: the integral is what is under test
        usage = acc.close_account("sb-1", Usage())
        elapsed = time.monotonic() - started
        expected = account.working_set_bytes / MIB * elapsed
        assert usage.memory_mib_seconds == pytest.approx(expected, rel=0.15)
        assert usage.peak_working_set_bytes >= ALLOC_MIB * MIB
        assert acc.node.working_set_bytes >= account.working_set_bytes  # the node cgroup counts it too
    finally:
        proc.kill()
        proc.wait()


def test_a_pass_over_a_thousand_sandboxes_is_cheap(node):
    driver, node_id = node
    ids = [f"sb-{i}" for i in range(1000)]
    for sid in ids:
        driver.cgroup(sandbox_cgroup_path(node_id, sid)).create()
    acc = MemoryAccounting(driver, node_id, stat_every=5)
    timings = []
    for _ in range(6):  # pass 0 opens the descriptors and reads memory.stat; 1-4 do not; 5 does
        started = time.perf_counter()
        acc.sample(ids)
        timings.append((time.perf_counter() - started) / len(ids))
    light, full = sorted(timings[1:5])[1], timings[5]
    print(f"memory sample: {light * 1e6:.1f} µs per sandbox (usage only), {full * 1e6:.1f} µs with memory.stat, "
          f"{(4 * light + full) / 5 * 1e6:.1f} µs on average")
    assert all(acc.account(s) is not None for s in ids)
    # a second's pass over 1,000 sandboxes costs < 10% of a core on average
    assert (4 * light + full) / 5 < 100e-6
