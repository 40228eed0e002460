"""DSec's memory experiment on this host: N q35 VMs (TCG) plus M crun containers, each running a
phase-shifted agent-like workload, under the memory-manager's levers added one at a time.

    sudo .venv/bin/python bench/memory.py --vms 3 --containers 3 --duration 120 --cycle 45 \
        --bursts-per-cycle 1 --hold-copies 6 --burst-mb 32 --json bench/results/memory.json

(~15 min on 2 cores; results and what they mean: docs/benchmarks.md.)

Workload (the same for every sandbox, driven by exec as an agent would drive it). One image
holds busybox, ``/data/lib`` (a copy of the host's Python 3.11 standard library: the
"dependencies", ~54 MiB of .py/.pyc/.so) and ``/data/deps.txt`` (its .py sources
concatenated, --deps-mb). Each sandbox
- loads the repository: a long-lived process (busybox awk, as an interpreter or language
  server would) reads deps.txt and keeps ``--hold-copies`` copies of it, shifted by a random
  0–4 KiB prefix so two sandboxes never hold identical pages: compressible text, private;
- then repeats a cycle of ``--cycle`` seconds: ``--bursts-per-cycle`` build/test bursts (the
  process scans all it holds, every file of /data is read, ``--burst-mb`` more is allocated for
  a moment), then an idle "thinking" gap with one probe exec (``true``) at a random point of it.
  Sandbox i's cycle is shifted by i × cycle / (N + M), so bursts rarely line up.

Configurations (one after the other, fresh sandboxes each time):
- ``a``: nothing. The VMs get the image over virtio-blk (the compressed layer, host page cache
  in writeback mode) and cache it again in their own page cache.
- ``b``: virtio-pmem + DAX, the node-agent's ``vm`` backend as built: the guests map the
  uncompressed image straight from the host page cache, one copy for all.
- ``c``: b + the memory-manager's balloon loop (BalloonService, policy.py) every 2 s.
- ``d``: c + cold-page reclaim as built: a zram swap, ReclaimService (idle/paused sandboxes →
  MADV_PAGEOUT) and, for idle VMs, the in-guest page cache drop through the guest agent.
- ``e``: d + the KSM policy (KsmPolicy: the scanner on while >= 3 VMs of one image run).

Idleness (reclaim/idleness.py) as the memory-manager judges it: a cpu rate at most
--ct-idle-cpu (containers) / --vm-idle-cpu (VMs, whose QEMU ticks when nothing runs) of a core,
and no exec in flight or ended within --idle-after, from the node-agent's own ActivityTracker
fed by this script's execs (the memory-manager's in-guest cache drop is housekeeping, not use).
The balloon inflates a busy VM only after BalloonPolicy.inflate_after_passes agreeing passes.
(The earlier run's ``e+``, VM idle by cpu rate through a wrapper, is what d/e now do.)

The balloon loop is the memory-manager's BalloonService unchanged; its HTTP calls to the
node-agent's internal balloon and exec routes are answered in-process by the same backend
methods those routes call (no Redis, RabbitMQ or scheduler in this run).

Host memory, sampled at 1 Hz by this script from the host (the MiB·s integral and the peak):
    Σ VMs  (Pss_Anon + Pss_Shmem of each QEMU: guest RAM and QEMU's heap; KSM-merged pages
            split between their sharers)
  + the VM image file's pages in the host page cache, counted once (fincore): the shared DAX
    copy in b–e, the virtio-blk read cache in a (each QEMU's Pss_File, which holds the same
    DAX pages again, is left out)
  + Σ containers' cgroup working set (usage − inactive file)
  + the zram device's own memory (mm_stat mem_used_total): what reclaim moved is still host
    memory, only compressed.
Also recorded: Σ QEMU VmRSS + containers (the naive sum, which counts DAX pages once per VM)
and the kernel's view (MemTotal − MemAvailable, minus its value before the configuration).

``--vms 0`` runs the containers-only form of the earlier session (configs a and d).
"""

import argparse
import asyncio
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for sub in ("libs/common", "services/node-agent", "services/memory-manager", "services/image-service"):
    sys.path.insert(0, str(ROOT / sub))

MIB = 1 << 20
ENVIRONMENT = "busybox-agent"


@dataclass(frozen=True)
class Config:
    name: str
    label: str
    pmem: bool = False
    balloon: bool = False
    reclaim: bool = False
    ksm: bool = False


CONFIGS = {c.name: c for c in (
    Config("a", "nothing (virtio-blk)"),
    Config("b", "pmem+DAX", pmem=True),
    Config("c", "b + balloon", pmem=True, balloon=True),
    Config("d", "c + cold-page reclaim", pmem=True, balloon=True, reclaim=True),
    Config("e", "d + KSM", pmem=True, balloon=True, reclaim=True, ksm=True),
)}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))], 1) if ordered else 0.0


# ---------------------------------------------------------------------------- workload

def holder_cmd(copies: int) -> str:
    """A process holding ``copies`` × deps.txt behind a random prefix, scanning all of it
    (index() reads every page) on each line written to /tmp/go, answering in /tmp/done."""
    return ("rm -f /tmp/go /tmp/done; mkfifo /tmp/go; "
            "awk 'BEGIN { RS = \"^\"; getline d < \"/data/deps.txt\"; close(\"/data/deps.txt\"); RS = \"\\n\"; "
            f"srand(); s = sprintf(\"%\" int(rand() * 4096) \"s\", \"\"); for (k = 0; k < {copies}; k++) s = s d; "
            "d = \"\"; while (1) { while ((getline line < \"/tmp/go\") > 0) { n = index(s, \"^\"); "
            "print line > \"/tmp/done\"; close(\"/tmp/done\") }; close(\"/tmp/go\") } }' >/dev/null 2>&1 &")


def burst_cmd(step: int, burst_mb: int) -> str:
    # Wake the holder (it scans what it holds), wait for its answer, read the dependencies,
    # then a temporary allocation (a compiler's or test run's, freed at exit).
    return (f"echo {step} > /tmp/go; while [ \"$(cat /tmp/done 2>/dev/null)\" != {step} ]; do sleep 0.05; done; "
            "find /data/lib -type f -exec cat {} + > /dev/null; "
            f"awk 'BEGIN {{ s = sprintf(\"%{burst_mb * MIB}s\", \"\") }}'")


def build_tree(root: str, deps_mb: int) -> None:
    from corral_image_service.builders.busybox import build_busybox

    build_busybox(root)
    data = Path(root, "data")
    data.mkdir()
    shutil.copytree("/usr/lib/python3.11", data / "lib", symlinks=True,
                    ignore=shutil.ignore_patterns("dist-packages", "site-packages"))
    sources = b"".join(p.read_bytes() for p in sorted((data / "lib").rglob("*.py")) if p.is_file())
    sources = sources.replace(b"^", b"")  # the holder's record separator and scan target
    out = bytearray()
    while len(out) < deps_mb * MIB:
        out += sources
    # Not a multiple of the page size: the copies a holder keeps are not page-aligned alike.
    (data / "deps.txt").write_bytes(bytes(out[:deps_mb * MIB - 1000]))
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444 | (0o111 if os.path.isdir(path) else 0))


# ---------------------------------------------------------------------------- host memory

def _smaps_rollup(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                    out[parts[0][:-1]] = int(parts[1]) * 1024
    except OSError:
        pass
    return out


def _rss_and_swap(pid: int) -> tuple[int, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(("VmRSS:", "VmSwap:")):
                    out[line.split(":")[0]] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out.get("VmRSS", 0), out.get("VmSwap", 0)


def _cached_bytes(path: str) -> int:
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                         capture_output=True, text=True, check=False).stdout.strip()
    return int(out) if out.isdigit() else 0


def _zram_used(device: str | None) -> int:
    if not device:
        return 0
    try:
        return int(Path(f"/sys/block/{device.removeprefix('/dev/')}/mm_stat").read_text().split()[2])
    except (OSError, IndexError, ValueError):
        return 0


def _kernel_used() -> int:
    info = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            key, value = line.split(":")
            info[key] = int(value.split()[0]) * 1024
    return info["MemTotal"] - info["MemAvailable"]


class HostSampler:
    """The honest host-memory integral of one configuration (see the module docstring)."""

    def __init__(self, vm_pids: dict[str, int], image: str, container_cgroups: dict, zram_device: str | None):
        self.vm_pids, self.image, self.cgroups, self.zram = vm_pids, image, container_cgroups, zram_device
        self.kernel_base = _kernel_used()
        self.samples: list[dict] = []

    def sample(self) -> dict:
        vm_private = vm_rss = vm_swap = 0
        for pid in self.vm_pids.values():
            rollup = _smaps_rollup(pid)
            vm_private += rollup.get("Pss_Anon", 0) + rollup.get("Pss_Shmem", 0)
            rss, swap = _rss_and_swap(pid)
            vm_rss, vm_swap = vm_rss + rss, vm_swap + swap
        containers = 0
        for cg in self.cgroups.values():
            try:
                containers += cg.memory_reading().working_set_bytes
            except OSError:
                pass
        s = {"t": time.monotonic(), "vm_private": vm_private, "image_cache": _cached_bytes(self.image) if self.vm_pids else 0,
             "containers": containers, "zram": _zram_used(self.zram), "vm_rss": vm_rss, "vm_swap": vm_swap,
             "kernel": _kernel_used() - self.kernel_base}
        s["total"] = s["vm_private"] + s["image_cache"] + s["containers"] + s["zram"]
        s["naive"] = s["vm_rss"] + s["containers"]
        self.samples.append(s)
        return s

    def integral_mib_s(self, key: str) -> float:
        total = 0.0
        for prev, cur in zip(self.samples, self.samples[1:], strict=False):
            total += (prev[key] + cur[key]) / 2 * (cur["t"] - prev["t"])
        return round(total / MIB, 0)

    def peak_mb(self, key: str) -> float:
        return round(max((s[key] for s in self.samples), default=0) / MIB, 1)


# ---------------------------------------------------------------------------- the memory-manager's loops

def node_agent_transport(vm_backend):
    """The node-agent's internal routes the BalloonService calls (GET/PUT balloon, POST exec),
    answered by the backend methods the node-agent's router calls for them."""
    import httpx

    from corral_common.contracts.exec import ExecRequest
    from corral_common.contracts.memory import BalloonTarget

    async def handle(request: httpx.Request) -> httpx.Response:
        parts = request.url.path.strip("/").split("/")  # v1 sandboxes <id> balloon|exec
        sid, op = parts[2], parts[3]
        if op == "balloon" and request.method == "GET":
            state = await vm_backend.balloon(sid)
            return httpx.Response(200, json=state.model_dump(mode="json"))
        if op == "balloon" and request.method == "PUT":
            target = BalloonTarget.model_validate_json(request.content)
            await vm_backend.set_balloon(sid, target.target_mb)
            return httpx.Response(200, json=target.model_dump())
        if op == "exec" and request.method == "POST":
            result = await vm_backend.exec(sid, ExecRequest.model_validate_json(request.content))
            return httpx.Response(200, json=result.model_dump(mode="json"))
        return httpx.Response(404, json={"detail": "not a route of this bench"})

    return httpx.MockTransport(handle)


# ---------------------------------------------------------------------------- one configuration

async def run_config(cfg: Config, args, backends: dict, images: dict, node_id: str, zram_device: str | None) -> dict:
    from corral_common.contracts.exec import ExecRequest
    from corral_common.contracts.sandboxes import SandboxSpec
    from corral_host.cgroups.detect import cgroup_driver
    from corral_host.cgroups.node import sandbox_cgroup_path
    from corral_memory_manager import metrics
    from corral_memory_manager.balloons.ksm import KsmPolicy
    from corral_memory_manager.balloons.policy import BalloonPolicy
    from corral_memory_manager.balloons.service import BalloonService
    from corral_memory_manager.host.service import HostMemoryService
    from corral_memory_manager.reclaim.idleness import IdleRule
    from corral_memory_manager.reclaim.policy import ReclaimPolicy
    from corral_memory_manager.reclaim.service import ReclaimService
    from corral_node_agent.backends.types import RootFs
    from corral_node_agent.sandboxes.activity import ActivityTracker

    tag = cfg.name.replace("+", "p")
    ct_backend = backends["container"]
    vm_backend = backends["vm-pmem" if cfg.pmem else "vm-blk"] if args.vms else None
    vm_image = images["dax" if cfg.pmem else "blk"]
    ct_ids = [f"bm{tag}-c{i}-{uuid.uuid4().hex[:6]}" for i in range(args.containers)]
    vm_ids = [f"bm{tag}-v{i}-{uuid.uuid4().hex[:6]}" for i in range(args.vms)]
    hold_mb = args.hold_copies * args.deps_mb
    started_ids: list[tuple[object, str]] = []
    timeout_s = int(args.duration + 900)
    try:
        for sid in ct_ids:
            await ct_backend.start(sid, SandboxSpec(environment=ENVIRONMENT, memory_mb=2 * hold_mb + args.burst_mb + 128,
                                                    disk_mb=64, pids_limit=64, timeout_s=timeout_s),
                                   RootFs([images["mount"]]))
            started_ids.append((ct_backend, sid))

        async def boot(sid: str) -> None:
            await vm_backend.start(sid, SandboxSpec(environment=ENVIRONMENT, backend="vm", memory_mb=args.vm_memory_mb,
                                                    disk_mb=256, pids_limit=256, timeout_s=timeout_s),
                                   RootFs([vm_image]))
            started_ids.append((vm_backend, sid))

        boot_started = time.monotonic()
        for i in range(0, len(vm_ids), args.boot_parallel):
            await asyncio.gather(*(boot(sid) for sid in vm_ids[i:i + args.boot_parallel]))
        boot_s = time.monotonic() - boot_started
        transports = sorted({str(vm_backend.describe(s)["image_transport"]) for s in vm_ids}) if vm_ids else []

        driver = cgroup_driver()
        sampler = HostSampler({s: vm_backend._get(s).machine.pid for s in vm_ids}, vm_image,
                              {s: driver.cgroup(sandbox_cgroup_path(node_id, s)) for s in ct_ids}, zram_device)
        activity = ActivityTracker()  # the node-agent's, fed by run() below as its exec route would
        kinds = {**{s: "container" for s in ct_ids}, **{s: "vm" for s in vm_ids}}
        reclaim = None
        if cfg.reclaim:
            reclaim = ReclaimService(node_id, ReclaimPolicy(idle_after_s=args.idle_after, min_bytes=8 * MIB,
                                                            max_bytes_per_pass=4 << 30),
                                     idle_rule=IdleRule(cpu_cores=args.ct_idle_cpu, vm_cpu_cores=args.vm_idle_cpu),
                                     activity=lambda: activity.snapshot(kinds))
        ksm = KsmPolicy(HostMemoryService(node_id), min_same_image=3, pages_to_scan=args.ksm_pages_to_scan) \
            if cfg.ksm else None
        balloons = None
        if cfg.balloon and vm_ids:
            balloons = BalloonService(node_id, "http://node-agent", "", BalloonPolicy(), lambda: list(vm_ids),
                                      transport=node_agent_transport(vm_backend), ksm=ksm,
                                      idle_seconds=reclaim.idle_seconds if reclaim else None,
                                      idle_after_s=args.idle_after, guest_cache_mb=64.0 if reclaim else None,
                                      housekeeping=reclaim.housekeeping if reclaim else None)

        def counters() -> dict[str, float]:  # the memory-manager's counters are per node, cumulative
            return {**{d: _counter(metrics.BALLOON_SETS.labels(node_id, d)) for d in ("inflate", "deflate")},
                    "guest_cache_drops": _counter(metrics.GUEST_RECLAIMS.labels(node_id))}

        counters_before = counters()
        ksm_sharing_before = _ksm("pages_sharing")  # merges left on the host by others count not
        lat = {"vm_burst": [], "vm_probe": [], "ct_burst": [], "ct_probe": []}
        failures: list[str] = []
        reclaimed: list = []
        balloon_min: dict[str, float] = {}
        stop = asyncio.Event()

        async def run(backend, sid: str, cmd: str, vm: bool) -> float:
            started = time.perf_counter()
            with activity.call(sid):
                res = await backend.exec(sid, ExecRequest(cmd=cmd, timeout_s=300, user="root" if vm else "user"))
            if res.exit_code != 0:
                raise RuntimeError(f"{sid}: {cmd[:40]}... exit {res.exit_code}: {res.stderr[:200]}")
            return (time.perf_counter() - started) * 1000

        async def sample_loop():
            while not stop.is_set():
                await asyncio.to_thread(sampler.sample)
                await asyncio.sleep(1.0)

        async def reclaim_loop():
            while not stop.is_set():
                report = await asyncio.to_thread(reclaim.run_once)
                reclaimed.extend(report.reclaimed)
                await asyncio.sleep(1.0)

        async def balloon_loop():
            while not stop.is_set():
                try:
                    await balloons.run_once()
                except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
                    failures.append(f"balloon pass: {exc}")
                for sid, entry in balloons.last.items():
                    actual = entry["state"]["actual_mb"]
                    balloon_min[sid] = min(balloon_min.get(sid, actual), actual)
                await asyncio.sleep(2.0)

        total = len(ct_ids) + len(vm_ids)

        async def pause(seconds: float) -> None:
            """Sleep, but end at once when the run stops."""
            try:
                await asyncio.wait_for(stop.wait(), max(0.0, seconds))
            except TimeoutError:
                pass

        async def workload(i: int, backend, sid: str, vm: bool, rng: random.Random):
            kind = "vm" if vm else "ct"
            try:
                await run(backend, sid, holder_cmd(args.hold_copies), vm)  # load the repository
                await pause(i * args.cycle / total)  # the phase shift
                step = 0
                while not stop.is_set():
                    step += 1
                    cycle_end = time.monotonic() + args.cycle
                    for j in range(args.bursts_per_cycle):
                        lat[f"{kind}_burst"].append(await run(backend, sid, burst_cmd(step * 100 + j, args.burst_mb), vm))
                    earliest = time.monotonic() + args.idle_after + 2
                    if cycle_end - 1 > earliest:
                        await pause(rng.uniform(earliest, cycle_end - 1) - time.monotonic())
                        if stop.is_set():
                            break
                        lat[f"{kind}_probe"].append(await run(backend, sid, "true", vm))
                    await pause(cycle_end - time.monotonic())
            except Exception as exc:  # noqa: BLE001 - a failed sandbox is a result, not a crash of the run
                failures.append(f"{sid}: {exc}")

        rng = random.Random(7)
        tasks = [asyncio.create_task(sample_loop())]
        if reclaim is not None:
            tasks.append(asyncio.create_task(reclaim_loop()))
        if balloons is not None:
            tasks.append(asyncio.create_task(balloon_loop()))
        members = [(ct_backend, s, False) for s in ct_ids] + [(vm_backend, s, True) for s in vm_ids]
        order = list(range(total))
        random.Random(3).shuffle(order)  # VMs and containers interleaved in phase
        work = [asyncio.create_task(workload(order[k], b, s, vm, random.Random(rng.random())))
                for k, (b, s, vm) in enumerate(members)]
        await asyncio.sleep(args.duration)
        stop.set()
        end = await asyncio.to_thread(sampler.sample)  # the window ends here for every configuration
        await asyncio.gather(*work)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        balloon_states = {}
        if vm_ids:
            for s in vm_ids:
                b = await vm_backend.balloon(s)
                balloon_states[s] = round(b.actual_mb)
        ksm_shared = (_ksm("pages_sharing") - ksm_sharing_before) * 4096 // MIB
        oom = sum(ct_backend._get(s).cgroup.oom_kills() for s in ct_ids)
        moved = {k: int(v - counters_before[k]) for k, v in counters().items()}
        if balloons is not None:
            await balloons.aclose()
        if ksm is not None:
            await asyncio.to_thread(ksm.apply, [])  # stops the scanner it started, restores the rate
        everything = lat["vm_probe"] + lat["ct_probe"]
        return {
            "config": cfg.name, "label": cfg.label, "vms": len(vm_ids), "containers": len(ct_ids),
            "duration_s": args.duration, "vm_boot_s": round(boot_s, 1), "image_transport": transports,
            "host_peak_mb": sampler.peak_mb("total"), "mib_s": sampler.integral_mib_s("total"),
            "breakdown_mib_s": {k: sampler.integral_mib_s(k) for k in ("vm_private", "image_cache", "containers", "zram")},
            "naive_rss_peak_mb": sampler.peak_mb("naive"), "naive_rss_mib_s": sampler.integral_mib_s("naive"),
            "vm_swapped_peak_mb": sampler.peak_mb("vm_swap"),
            "kernel_used_peak_mb": sampler.peak_mb("kernel"), "kernel_used_mib_s": sampler.integral_mib_s("kernel"),
            "end_sample_mb": {k: round(v / MIB, 1) for k, v in end.items() if k != "t"},
            "samples": len(sampler.samples),
            "reclaims": len(reclaimed), "reclaimed_mb": round(sum(r.reclaimed_bytes for r in reclaimed) / MIB, 1),
            "reclaimed_vms": sorted({r.sandbox_id for r in reclaimed if r.sandbox_id in vm_ids}),
            "balloon_actual_end_mb": balloon_states, "balloon_actual_min_mb": {k: round(v) for k, v in balloon_min.items()},
            "balloon_sets": {"inflate": moved["inflate"], "deflate": moved["deflate"]},
            "guest_cache_drops": moved["guest_cache_drops"],
            "ksm_pages_sharing_end_mb": ksm_shared, "container_oom_kills": oom, "failures": failures,
            "exec_probe_p50_ms": pct(everything, 50), "exec_probe_p99_ms": pct(everything, 99), "probes": len(everything),
            **{f"{k}_p50_ms": pct(v, 50) for k, v in lat.items()}, **{f"{k}_p99_ms": pct(v, 99) for k, v in lat.items()},
            **{f"{k}_n": len(v) for k, v in lat.items()},
        }
    finally:
        for backend, sid in started_ids:
            try:
                await backend.stop(sid)
            except Exception as exc:  # noqa: BLE001 - keep stopping the others
                print(f"stop {sid}: {exc}", file=sys.stderr)


# ---------------------------------------------------------------------------- main

def _counter(child) -> float:
    """A prometheus_client counter's value (the memory-manager's metrics, in-process here)."""
    return child._value.get()


def _ksm(knob: str) -> int:
    return int(Path(f"/sys/kernel/mm/ksm/{knob}").read_text())


def prepare_images(work: str, deps_mb: int) -> tuple[dict, dict]:
    """The one image three ways: lz4hc EROFS file (virtio-blk) and its mount (containers), and
    the node's DAX variant (virtio-pmem)."""
    from corral_host import mounts
    from corral_node_agent.layers.dax import build_dax_image

    # QEMU runs as a dropped uid and opens the layer files: the path to them must be searchable.
    os.chmod(work, 0o755)  # noqa: S103 - read-only images of public files, nothing secret
    tree = f"{work}/root"
    build_tree(tree, deps_mb)
    images = {"blk": f"{work}/base.erofs", "dax": f"{work}/dax/base.erofs", "mount": f"{work}/mnt",
              "containers": f"{work}/containers.erofs"}
    subprocess.run(["mkfs.erofs", "-zlz4hc", images["blk"], tree], check=True, capture_output=True)
    os.chmod(images["blk"], 0o444)
    # The containers mount their own copy: the VM image's page cache is then only the VMs' doing.
    shutil.copyfile(images["blk"], images["containers"])
    os.makedirs(f"{work}/dax")
    os.chmod(f"{work}/dax", 0o755)  # noqa: S103 - as above
    build_dax_image(tree, images["dax"], "bench-memory")
    sizes = {k: round(os.path.getsize(images[k]) / MIB, 1) for k in ("blk", "dax")}
    shutil.rmtree(tree)
    os.mkdir(images["mount"])
    mounts.mount_erofs(images["containers"], images["mount"])
    return images, sizes


def evict_page_cache(path: str) -> None:
    """Start each configuration with the VM image out of the host page cache (mkfs and the
    previous configuration left it there); only this file, nothing else of the host."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


async def main_async(args) -> list[dict]:
    from corral_host import mounts
    from corral_host.cgroups import node as node_cgroup
    from corral_host.cgroups.detect import cgroup_driver
    from corral_memory_manager.reclaim.zram import ensure_zram_swap, remove_zram
    from corral_node_agent.backends.container import ContainerBackend
    from corral_node_agent.backends.types import LayerFormat
    from corral_node_agent.backends.vm import guestkit
    from corral_node_agent.backends.vm.backend import FullVmBackend
    from corral_node_agent.settings import NodeAgentSettings

    class BlkVmBackend(FullVmBackend):
        """The same q35 machine with its layers on virtio-blk (config a): only the transport differs."""

        layer_format = LayerFormat.files

    work = tempfile.mkdtemp(prefix="corral-bench-memory-")
    node_id = f"bench-mem-{uuid.uuid4().hex[:6]}"
    images, sizes = await asyncio.to_thread(prepare_images, work, args.deps_mb)
    driver = cgroup_driver()
    node_cgroup.cap(driver, node_id, 16 << 30, 20000)
    settings = NodeAgentSettings(node_id=node_id, state_dir=f"{work}/state")
    if args.vms:
        guestkit.build(settings.vm.guestkit_dir)
    backends = {"container": ContainerBackend(settings)}
    if args.vms:
        backends["vm-pmem"] = FullVmBackend(settings)
        backends["vm-blk"] = BlkVmBackend(settings)
    ksm_run = str(_ksm("run"))
    results = []
    try:
        for name in args.configs:
            cfg = CONFIGS[name]
            if cfg.ksm and ksm_run != "0":
                print(f"skip {name}: the host already runs KSM (run={ksm_run})", file=sys.stderr)
                continue
            for image in ("blk", "dax"):
                await asyncio.to_thread(evict_page_cache, images[image])
            swap = ensure_zram_swap(4 << 30) if cfg.reclaim else None
            try:
                results.append(await run_config(cfg, args, backends, images, node_id,
                                                swap.device if swap is not None else None))
            except Exception as exc:  # noqa: BLE001 - recorded; the other configurations still run
                results.append({"config": name, "label": cfg.label, "error": f"{type(exc).__name__}: {exc}"})
            finally:
                if swap is not None and swap.created:
                    await asyncio.to_thread(remove_zram, swap.device.removeprefix("/dev/zram"))
            results[-1]["image_mb"] = sizes
            print(json.dumps(results[-1]), flush=True)
    finally:
        for backend in backends.values():
            await backend.close()
        node_cgroup.release(driver, node_id)
        mounts.umount_tree(work)
        shutil.rmtree(work, ignore_errors=True)
    return results


def print_table(results: list[dict]) -> None:
    ok = [r for r in results if "error" not in r]
    base = next((r for r in ok if r["config"] == "b"), None) or next((r for r in ok if r["config"] == "a"), None)
    print(f"\n{'config':4} {'':24} {'peak MiB':>9} {'MiB·s':>9} {'vs ' + (base['config'] if base else '-'):>7} "
          f"{'probe p50/p99 ms':>17} {'VM burst p50/p99 ms':>20} {'ct burst p50/p99':>17} {'fail':>4}")
    for r in results:
        if "error" in r:
            print(f"{r['config']:4} {r['label']:24} ERROR {r['error'][:100]}")
            continue
        saving = f"{100 * (1 - r['mib_s'] / base['mib_s']):.1f}%" if base and base["mib_s"] else "-"
        print(f"{r['config']:4} {r['label']:24} {r['host_peak_mb']:9.0f} {r['mib_s']:9.0f} {saving:>7} "
              f"{r['exec_probe_p50_ms']:>8.0f}/{r['exec_probe_p99_ms']:<8.0f} "
              f"{r['vm_burst_p50_ms']:>9.0f}/{r['vm_burst_p99_ms']:<10.0f} "
              f"{r['ct_burst_p50_ms']:>8.0f}/{r['ct_burst_p99_ms']:<8.0f} {len(r['failures']):4}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vms", type=int, default=3)
    parser.add_argument("--containers", type=int, default=3)
    parser.add_argument("--vm-memory-mb", type=int, default=448)
    parser.add_argument("--boot-parallel", type=int, default=2, help="VMs booted at once")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds per configuration")
    parser.add_argument("--cycle", type=float, default=45.0, help="seconds of one burst + idle cycle")
    parser.add_argument("--bursts-per-cycle", type=int, default=1)
    parser.add_argument("--deps-mb", type=int, default=12)
    parser.add_argument("--hold-copies", type=int, default=6)
    parser.add_argument("--burst-mb", type=int, default=32)
    parser.add_argument("--idle-after", type=float, default=8.0)
    parser.add_argument("--vm-idle-cpu", type=float, default=0.15, help="a VM at or below this many cores is idle")
    parser.add_argument("--ct-idle-cpu", type=float, default=0.01, help="a container at or below this is idle")
    parser.add_argument("--ksm-pages-to-scan", type=int, default=1000)
    parser.add_argument("--configs", nargs="+", default=["a", "b", "c", "d", "e"], choices=list(CONFIGS))
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root")
    from corral_host import namespaces

    namespaces.enter_private_mount_namespace()  # single-threaded still: crun needs the hybrid layout hidden
    results = asyncio.run(main_async(args))
    print_table(results)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        command = " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], os.getcwd()), *sys.argv[1:]])
        Path(args.json).write_text(json.dumps({
            "benchmark": "memory", "command": command, "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
            "host": {"nproc": os.cpu_count(), "kernel": os.uname().release, "loadavg": os.getloadavg()[0]},
            "args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
