"""Runs inside the microVM of test_vm_cgroup_v2.py, as root, with a copy of the real
corral_host.cgroups package: drives the v2 driver against the guest kernel's cgroup2
hierarchy (mounted at /sys/fs/cgroup by the test, nothing else using it) and prints what it saw
as one JSON object for the test to assert on. Standard library only (the guest has no more)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from corral_host.cgroups.detect import cgroup_driver
from corral_host.cgroups.files import flat_keyed

MIB = 1 << 20
ROOT = Path("/sys/fs/cgroup")


def until(check, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def start(group, *argv: str) -> subprocess.Popen:
    """``argv`` in ``group``: the child joins before it execs (as QEMU's launcher does)."""
    def join():
        for procs in group.procs_files():
            with open(procs, "w") as fh:
                fh.write(str(os.getpid()))
    return subprocess.Popen(argv, preexec_fn=join, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def read(group, name: str) -> str:
    return (group.dir / name).read_text().strip()


def at_the_root(seen: dict) -> None:
    """Nothing delegated: the node's tree starts at the root cgroup, which holds every process
    of the guest (the root is exempt from "no internal processes")."""
    driver = cgroup_driver()
    seen.update(driver=driver.name, available=driver.available(), base=driver.base, swap_limit=driver.swap_limit)
    node = driver.cgroup("/corral/n1").create()
    node.set_limits(192 * MIB, 64)
    sb = driver.cgroup("/corral/n1/sb").create()
    sb.set_limits(32 * MIB, 8, cpu=0.25)
    sb.reset_counters()
    seen["root_subtree_control"] = (ROOT / "cgroup.subtree_control").read_text().split()
    seen["sb_controllers"] = read(sb, "cgroup.controllers").split()
    seen["limits"] = {f: read(sb, f) for f in ("memory.max", "memory.swap.max", "pids.max", "cpu.max")}
    seen["node_limits"] = {f: read(node, f) for f in ("memory.max", "pids.max")}
    seen["runtime_path"] = sb.runtime_path

    # pids.max 8: the shell and 7 sleeps, then fork fails
    bomb = start(sb, "/bin/sh", "-c", "i=0; while [ $i -lt 20 ]; do sleep 300 </dev/null >/dev/null 2>&1 & "
                                      "i=$((i+1)); done")
    _, err = bomb.communicate(timeout=120)
    seen["pids"] = {"shell_exit": bomb.returncode, "stderr": err[-300:], "current": int(read(sb, "pids.current")),
                    "limited": sb.stats().pids_limited, "left": len(sb.pids())}
    seen["pids"]["killed"] = sb.kill_all(timeout=10)
    seen["pids"].update(after_kill=sb.pids(), populated_after_kill=sb.populated())

    # memory.max 32 MiB, no swap: a 128 MiB allocation is OOM-killed, and memory.events says so
    sb.set_limits(32 * MIB, 64)  # (cpu lifted)
    seen["cpu_lifted"] = read(sb, "cpu.max")
    sb.reset_counters()
    hog = start(sb, sys.executable, "-c", "b = b'x' * (128 << 20)")
    hog.communicate(timeout=300)
    stats = sb.stats()
    seen["oom"] = {"exit": hog.returncode, "oom_kills": stats.oom_kills, "oom_killed": stats.oom_killed,
                   "peak": stats.peak_memory_bytes, "events": flat_keyed(read(sb, "memory.events"))}
    sb.reset_counters()
    seen["oom"]["after_reset"] = sb.oom_kills()

    # cpu.max a quarter of a core: a busy loop is throttled, and its cpu time is counted
    sb.set_limits(32 * MIB, 64, cpu=0.25)
    sb.reset_counters()
    busy = start(sb, "/bin/sh", "-c", "while :; do :; done")
    throttled = until(lambda: flat_keyed(read(sb, "cpu.stat")).get("nr_throttled", 0) >= 3)
    seen["cpu"] = {"throttled": throttled, "cpu_ms": sb.cpu_ms(), "stat": flat_keyed(read(sb, "cpu.stat"))}
    seen["cpu"]["killed"] = sb.kill_all(timeout=10) and busy.wait(timeout=30) == -9
    sb.reset_counters()
    seen["cpu"]["after_reset_ns"] = sb.stats().cpu_ns

    # freeze and thaw
    sleeper = start(sb, "sleep", "300")
    seen["freeze"] = {"frozen": until(sb.freeze, timeout=30), "events": flat_keyed(read(sb, "cgroup.events"))}
    sb.thaw()
    seen["freeze"]["after_thaw"] = flat_keyed(read(sb, "cgroup.events"))

    # a memory cap below what is in use (anonymous, no swap: nothing to reclaim) is refused
    sb.set_limits(96 * MIB, 64)
    holder = start(sb, sys.executable, "-c", "import time; b = b'x' * (48 << 20); print('held', flush=True); "
                                             "time.sleep(300)")
    held = holder.stdout.readline().strip()
    try:
        sb.set_limits(16 * MIB, 64)
        refused = None
    except OSError as exc:
        refused = exc.errno
    seen["cap_below_usage"] = {"held": held, "errno": refused, "memory.max": read(sb, "memory.max"),
                               "alive": holder.poll() is None}

    # removal kills what runs below (cgroup.kill) and removes the tree
    node.remove()
    seen["remove"] = {"node_exists": node.dir.exists(), "sleeper": sleeper.wait(timeout=30),
                      "holder": holder.wait(timeout=30)}
    driver.cgroup("/corral").remove_if_empty()
    seen["remove"]["corral_exists"] = (ROOT / "corral").exists()


def delegated(seen: dict) -> None:
    """systemd's Delegate=yes: the agent's unit cgroup, marked trusted.delegate, holds the agent.
    The node's tree goes below it, and the agent moves to a leaf so that the unit's cgroup may
    hand controllers down."""
    unit = ROOT / "corral-node-agent.service"
    unit.mkdir()
    (unit / "cgroup.procs").write_text(str(os.getpid()))
    os.setxattr(unit, "trusted.delegate", b"1")
    driver = cgroup_driver()
    group = driver.cgroup("/corral/n2/sb").create()
    group.set_limits(16 * MIB, 4)
    out = seen["delegated"] = {
        "base": driver.base, "own": Path("/proc/self/cgroup").read_text().strip(),
        "unit_procs": (unit / "cgroup.procs").read_text().split(),
        "unit_subtree_control": (unit / "cgroup.subtree_control").read_text().split(),
        "runtime_path": group.runtime_path, "dir": str(group.dir), "pids.max": read(group, "pids.max")}
    sleeper = start(group, "sleep", "300")
    out["killed"] = group.kill_all(timeout=10) and sleeper.wait(timeout=30) == -9
    driver.cgroup("/corral/n2").remove()
    driver.cgroup("/corral").remove_if_empty()
    out["removed"] = not (unit / "corral").exists()


if __name__ == "__main__":
    seen: dict = {"kernel": os.uname().release}
    at_the_root(seen)
    delegated(seen)
    print(json.dumps(seen))
