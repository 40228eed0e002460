"""DSec's memory experiment, in the reduced form that fits this host: phase-shifted agent-like
workloads in crun containers, with and without the memory-manager's cold-page reclaim.

    sudo .venv/bin/python bench/memory.py --containers 8 --duration 120 --json bench/results/memory.json

Each container runs the shape of an agent task: it loads a "repository and its dependencies"
(a long-lived process holding --hold-mb of memory it reuses, as an interpreter or language
server would), then repeats a build/test burst (it scans all of the held memory and allocates
--burst-mb more for a moment), followed by a long idle "thinking" gap. Container i's cycle is
shifted by i × cycle / N, so bursts never line up. The phases are driven by exec, as an agent
would drive them.

Configurations (same workload, one after the other):
- ``none``: nothing reclaims (the kernel alone; no swap is set up).
- ``reclaim``: a zram swap and the memory-manager's ReclaimService
  (``--idle-after`` seconds of no cpu time → MADV_PAGEOUT), the lever of configuration (d).

It reports each configuration's host peak (the node cgroup's working set), its memory·time
(MiB·s, node cgroup, sampled at 1 Hz by the node-agent's MemoryAccounting), and the p50/p99
latency of the bursts and of a probe exec (``true``) sent at a random point of each idle gap.
The VM configurations of the issue (pmem+DAX, balloon, KSM) are not part of this run.
"""

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for sub in ("libs/common", "services/node-agent", "services/memory-manager", "services/image-service"):
    sys.path.insert(0, str(ROOT / sub))

MIB = 1 << 20


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))], 1) if ordered else 0.0


def holder_cmd(hold_mb: int) -> str:
    """A process holding hold_mb, scanning all of it (index() reads every page) on each line
    written to /tmp/go, and answering in /tmp/done."""
    return ("mkfifo /tmp/go; "
            f"awk 'BEGIN {{ s = sprintf(\"%{hold_mb * MIB}s\", \"\"); "
            "while (1) { while ((getline line < \"/tmp/go\") > 0) { n = index(s, \"x\"); "
            "print line > \"/tmp/done\"; close(\"/tmp/done\") }; close(\"/tmp/go\") } }' >/dev/null 2>&1 &")


def burst_cmd(step: int, burst_mb: int) -> str:
    # Wake the holder (it scans its memory), wait for its answer, then a temporary allocation.
    return (f"echo {step} > /tmp/go; while [ \"$(cat /tmp/done 2>/dev/null)\" != {step} ]; do :; done; "
            f"awk 'BEGIN {{ s = sprintf(\"%{burst_mb * MIB}s\", \"\") }}'")


async def run_config(name: str, args, backend, layer, node_id: str) -> dict:
    from corral_common.exec import ExecRequest
    from corral_common.sandboxes import SandboxSpec
    from corral_memory_manager.reclaim.policy import ReclaimPolicy
    from corral_memory_manager.reclaim.service import ReclaimService
    from corral_node_agent.backends.types import RootFs
    from corral_node_agent.cgroups.detect import cgroup_driver
    from corral_node_agent.memory.accounting import MemoryAccounting

    async def run(sid: str, cmd: str) -> float:
        started = time.perf_counter()
        res = await backend.exec(sid, ExecRequest(cmd=cmd, timeout_s=120))
        if res.exit_code != 0:
            raise RuntimeError(f"{sid}: {cmd[:40]}... exit {res.exit_code}: {res.stderr[:200]}")
        return (time.perf_counter() - started) * 1000

    ids = [f"bm-{name}-{i}-{uuid.uuid4().hex[:6]}" for i in range(args.containers)]
    for sid in ids:
        await backend.start(sid, SandboxSpec(environment="busybox", memory_mb=args.hold_mb + args.burst_mb + 128,
                                             disk_mb=64, pids_limit=64, timeout_s=args.duration + 600),
                            RootFs([layer]))
    driver = cgroup_driver()
    accounting = MemoryAccounting(driver, node_id)
    reclaim = ReclaimService(node_id, ReclaimPolicy(idle_after_s=args.idle_after, min_bytes=8 * MIB,
                                                    max_bytes_per_pass=4 << 30)) if name == "reclaim" else None
    bursts, probes, reclaimed = [], [], []
    stop = asyncio.Event()

    async def sampler():
        while not stop.is_set():
            await asyncio.to_thread(accounting.sample, ids)
            await asyncio.sleep(1.0)

    async def reclaimer():
        while not stop.is_set():
            report = await asyncio.to_thread(reclaim.run_once)
            reclaimed.extend(r.reclaimed_bytes for r in report.reclaimed)
            await asyncio.sleep(1.0)

    async def workload(i: int, sid: str, rng: random.Random):
        await run(sid, holder_cmd(args.hold_mb))  # load the repository
        await asyncio.sleep(i * args.cycle / len(ids))  # the phase shift
        step = 0
        while not stop.is_set():
            step += 1
            for j in range(args.bursts_per_cycle):
                bursts.append(await run(sid, burst_cmd(step * 100 + j, args.burst_mb)))
            gap_end = time.monotonic() + args.cycle - args.burst_s
            probe_at = time.monotonic() + rng.uniform(args.idle_after + 2, max(args.idle_after + 2.5,
                                                                                args.cycle - args.burst_s - 1))
            await asyncio.sleep(max(0.0, probe_at - time.monotonic()))
            if stop.is_set():
                break
            probes.append(await run(sid, "true"))
            await asyncio.sleep(max(0.0, gap_end - time.monotonic()))

    tasks = [asyncio.create_task(sampler())]
    if reclaim is not None:
        tasks.append(asyncio.create_task(reclaimer()))
    rng = random.Random(7)
    work = [asyncio.create_task(workload(i, sid, random.Random(rng.random()))) for i, sid in enumerate(ids)]
    await asyncio.sleep(args.duration)
    stop.set()
    await asyncio.gather(*work, return_exceptions=False)
    for t in tasks:
        t.cancel()
    await asyncio.to_thread(accounting.sample, ids)
    per_sandbox_mib_s = sum(accounting.account(s).mib_seconds for s in ids if accounting.account(s))
    oom = sum(backend._get(s).cgroup.oom_kills() for s in ids)
    for sid in ids:
        await backend.stop(sid)
    return {"config": name, "containers": len(ids), "duration_s": args.duration,
            "host_peak_mb": round(accounting.node.peak_working_set_bytes / MIB, 1),
            "node_mib_s": round(accounting.node.mib_seconds, 0), "sandboxes_mib_s": round(per_sandbox_mib_s, 0),
"reclaimed_mb": round(sum(reclaimed) / MIB, 1), "oom_kills": oom,
            "burst_p50_ms": pct(bursts, 50), "burst_p99_ms": pct(bursts, 99), "bursts": len(bursts),
            "probe_p50_ms": pct(probes, 50), "probe_p99_ms": pct(probes, 99), "probes": len(probes)}


async def main_async(args) -> list[dict]:
    from corral_image_service.builders.busybox import build_busybox
    from corral_memory_manager.reclaim.zram import ensure_zram_swap, remove_zram
    from corral_node_agent import host
    from corral_node_agent.backends.container import ContainerBackend
    from corral_node_agent.cgroups import node as node_cgroup
    from corral_node_agent.cgroups.detect import cgroup_driver
    from corral_node_agent.settings import NodeAgentSettings

    work = tempfile.mkdtemp(prefix="corral-bench-memory-")
    node_id = f"bench-mem-{uuid.uuid4().hex[:6]}"
    build_busybox(f"{work}/root")
    await asyncio.to_thread(subprocess.run, ["mkfs.erofs", "-zlz4hc", f"{work}/base.erofs", f"{work}/root"],
                            check=True, capture_output=True)
    os.mkdir(f"{work}/mnt")
    host.mount_erofs(f"{work}/base.erofs", f"{work}/mnt")
    driver = cgroup_driver()
    node_cgroup.cap(driver, node_id, 16 << 30, 20000)
    backend = ContainerBackend(NodeAgentSettings(node_id=node_id, state_dir=f"{work}/state"))
    results = []
    try:
        for name in args.configs:
            swap = ensure_zram_swap(4 << 30) if name == "reclaim" else None
            try:
                results.append(await run_config(name, args, backend, f"{work}/mnt", node_id))
            finally:
                if swap is not None and swap.created:
                    remove_zram(swap.device.removeprefix("/dev/zram"))
            print(json.dumps(results[-1]), flush=True)
    finally:
        await backend.close()
        node_cgroup.release(driver, node_id)
        host.umount_tree(work)
        shutil.rmtree(work, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--containers", type=int, default=8)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds per configuration")
    parser.add_argument("--cycle", type=float, default=40.0, help="seconds of one burst + idle cycle")
    parser.add_argument("--burst-s", type=float, default=4.0)
    parser.add_argument("--bursts-per-cycle", type=int, default=2)
    parser.add_argument("--hold-mb", type=int, default=96)
    parser.add_argument("--burst-mb", type=int, default=48)
    parser.add_argument("--idle-after", type=float, default=8.0)
    parser.add_argument("--configs", nargs="+", default=["none", "reclaim"])
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    from corral_node_agent import host

    host.enter_private_mount_namespace()  # single-threaded still: crun needs the hybrid layout hidden
    results = asyncio.run(main_async(args))
    base = next((r for r in results if r["config"] == "none"), None)
    print(f"\n{'config':10} {'peak MiB':>9} {'MiB·s':>9} {'vs none':>8} {'burst p50/p99 ms':>18} "
          f"{'probe p50/p99 ms':>18} {'oom':>4}")
    for r in results:
        saving = f"{100 * (1 - r['node_mib_s'] / base['node_mib_s']):.1f}%" if base and base["node_mib_s"] else "-"
        print(f"{r['config']:10} {r['host_peak_mb']:9.0f} {r['node_mib_s']:9.0f} {saving:>8} "
              f"{r['burst_p50_ms']:>8.0f}/{r['burst_p99_ms']:<8.0f} {r['probe_p50_ms']:>8.1f}/{r['probe_p99_ms']:<8.1f} "
              f"{r['oom_kills']:4}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
