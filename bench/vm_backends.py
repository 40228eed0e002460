#!/usr/bin/env python3
"""VM backends benchmark: microvm and vm through Corral vs bare QEMU, shared images, snapshots,
density — side by side in one run.

    python bench/vm_backends.py --boots 5 --vms 8 --density 16 --json bench/results/vm_backends.json

Root. Brings its own platform up (scripts/corral_platform.py, 1 node) for the Corral phase;
the other phases drive QEMU directly on the node's guest kit (built when missing).

Phases:
  boot      N x [create(backend=K, wait running) -> exec(["true"])] through the SDK, K = microvm, vm;
            vs N x bare QEMU with the same kernel, initramfs, devices and layer, first command
            over the same guest agent, no Corral in between (ratio = Corral p50 / bare p50)
  memory    V q35 VMs each read every file of a base image with incompressible content, all at
            once: layers on virtio-pmem + DAX vs virtio-blk (host memory used at the peak,
            page cache included, and the VMs' summed PSS)
  snapshot  save a running microvm (QMP migrate to a file) and restore it as a new VM
            (time to the first command answered)
  density   D idle 256 MiB microvms held at once, two arms: Corral's defaults (the backend's
            machine + the memory-manager's default KSM policy) vs a floor (bare QEMU, same
            kernel, QEMU's own defaults): PSS each and where it goes, exec p50 at idle vs the
            first exec, QEMU CPU at idle per VM; extrapolated to --extrapolate-to VMs
"""

import argparse
import asyncio
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "clients" / "python"))

from sandbox_lifecycle import pct, platform_down, platform_up, summary  # noqa: E402

from corral_common.contracts.exec import ExecRequest  # noqa: E402
from corral_node_agent.backends.vm import guestkit  # noqa: E402
from corral_node_agent.backends.vm.agent_client import GuestAgentClient  # noqa: E402
from corral_node_agent.backends.vm.machine import QemuMachine  # noqa: E402
from corral_node_agent.backends.vm.qemu import (  # noqa: E402
    PMEM_ALIGN,
    LayerDisk,
    MachineConfig,
    detect_accelerator,
    guest_lowers,
)
from corral_node_agent.settings import NodeAgentSettings  # noqa: E402

TARGETS = {"boot_overhead_ratio": ("<=", 1.2), "pmem_memory_saving_pct": (">=", 40.2)}


def meminfo() -> dict[str, int]:
    out = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            key, value = line.split(":")
            out[key] = int(value.split()[0])
    return out


def used_kb() -> int:
    m = meminfo()
    return m["MemTotal"] - m["MemFree"]


def pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_anon_kb(pid: int) -> int:
    """Anonymous memory of a QEMU process: guest RAM it touched + QEMU's own heap and TCG cache."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cached_kb(path: str) -> int:
    """Pages of a file in the host page cache (whoever mapped or read them)."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                         capture_output=True, text=True, check=True).stdout.strip()
    return int(out or 0) // 1024


def drop_caches() -> None:
    subprocess.run(["sync"], check=False)
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3")


# ------------------------------------------------------------------------ images

def build_busybox_tree(root: str, payload_mb: int = 0) -> None:
    from corral_image_service.builders.busybox import build_busybox

    build_busybox(root)
    if payload_mb:
        data = Path(root, "data")
        data.mkdir()
        for i in range(payload_mb // 4):
            (data / f"blob{i:03d}").write_bytes(os.urandom(4 * 1024 * 1024))


def make_layer(tree: str, out: str, dax: bool) -> str:
    if dax:
        subprocess.run(["mkfs.erofs", "-Enoinline_data", out, tree], check=True, capture_output=True)
        size = os.path.getsize(out)
        os.truncate(out, -(-size // PMEM_ALIGN) * PMEM_ALIGN)
    else:
        subprocess.run(["mkfs.erofs", "-zlz4hc", out, tree], check=True, capture_output=True)
    return out


# ------------------------------------------------------------------------ bare QEMU

class BareVm:
    """QEMU + the guest agent, without Corral (no API, scheduler, node-agent or cgroup)."""

    def __init__(self, kit, workdir: str, machine: str, layer: LayerDisk, memory_mb: int = 256):
        self.dir = os.path.join(workdir, uuid.uuid4().hex[:8])
        os.makedirs(self.dir)
        accel = detect_accelerator()
        layers = [layer]
        cmdline = guestkit.kernel_cmdline(lowers=guest_lowers(layers), upper_mb=256, hostname="bare",
                                          tty_shell=machine == "q35", tcg=accel == "tcg")
        self.config = MachineConfig(machine=machine, memory_mb=memory_mb, cpus=1, accelerator=accel,
                                    qmp_socket=f"{self.dir}/qmp.sock", console_socket=f"{self.dir}/console.sock",
                                    # as the backend: a machine with a screen boots the bzImage
                                    kernel=kit.display_kernel if machine == "q35" else kit.kernel,
                                    initramfs=kit.initramfs, cmdline=cmdline,
                                    agent_socket=f"{self.dir}/agent.sock", layers=layers, display=machine == "q35")
        self.machine = QemuMachine(NodeAgentSettings().qemu, self.config)
        self.agent: GuestAgentClient | None = None

    async def boot(self) -> None:
        await self.machine.launch()
        self.agent = await GuestAgentClient.connect(self.config.agent_socket, timeout_s=120)

    async def exec(self, cmd) -> str:
        assert self.agent is not None
        res = await self.agent.exec(ExecRequest(cmd=cmd, user="root", timeout_s=600))
        if res.exit_code != 0:
            raise RuntimeError(f"{cmd!r} failed: {res.stderr[-500:]}")
        return res.stdout

    async def close(self) -> None:
        if self.agent is not None:
            await self.agent.close()
        await self.machine.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


async def bare_boots(kit, workdir: str, machine: str, layer: LayerDisk, n: int) -> list[float]:
    times = []
    for _ in range(n):
        vm = BareVm(kit, workdir, machine, layer)
        t = time.perf_counter()
        try:
            await vm.boot()
            await vm.exec(["true"])
            times.append((time.perf_counter() - t) * 1000)
        finally:
            await vm.close()
    return times


# ------------------------------------------------------------------------ Corral

def corral_boots(url: str, key: str, backend: str, n: int) -> list[float]:
    from corral import Corral

    times = []
    with Corral(url, api_key=key) as client:
        for _ in range(n):
            t = time.perf_counter()
            sb = client.sandboxes.create(environment="busybox", backend=backend, memory_mb=256, timeout_s=600)
            try:
                res = sb.exec(["true"])
                assert res.exit_code == 0, res
                times.append((time.perf_counter() - t) * 1000)
            finally:
                sb.delete()
    return times


# ------------------------------------------------------------------------ memory, snapshot, density

async def memory_phase(kit, workdir: str, tree_layers: dict[str, str], vms: int, memory_mb: int) -> dict:
    out = {}
    for transport in ("pmem", "blk"):
        drop_caches()
        await asyncio.sleep(1)
        base = used_kb()
        path = tree_layers["dax" if transport == "pmem" else "blk"]
        machines = [BareVm(kit, workdir, "q35", LayerDisk(path, transport), memory_mb) for _ in range(vms)]
        try:
            t = time.perf_counter()
            await asyncio.gather(*(m.boot() for m in machines))
            boot_s = time.perf_counter() - t
            t = time.perf_counter()
            await asyncio.gather(*(m.exec("cat /data/* > /dev/null; echo done") for m in machines))
            read_s = time.perf_counter() - t
            peak = used_kb() - base
            pss = sum(pss_kb(m.machine.pid) for m in machines if m.machine.pid)
            anon = sum(rss_anon_kb(m.machine.pid) for m in machines if m.machine.pid)
            image_cache = cached_kb(path)
            out[transport] = {"vms": vms, "host_mb": round((anon + image_cache) / 1024, 1),
                              "qemu_anon_mb": round(anon / 1024, 1), "image_page_cache_mb": round(image_cache / 1024, 1),
                              "host_used_delta_mb": round(peak / 1024, 1), "qemu_pss_sum_mb": round(pss / 1024, 1),
                              "boot_all_s": round(boot_s, 2), "read_all_s": round(read_s, 2)}
        finally:
            await asyncio.gather(*(m.close() for m in machines))
    # Host memory = the VMs' anonymous memory (guest RAM incl. each guest's own page cache)
    # + the image's pages in the host page cache, counted once. Unlike MemFree deltas this
    # is not disturbed by whatever else the shared machine is doing.
    out["pmem_memory_saving_pct"] = round(100 * (1 - out["pmem"]["host_mb"] / out["blk"]["host_mb"]), 1)
    return out


async def snapshot_phase(kit, workdir: str, layer: str, n: int) -> dict:
    saves, restores, sizes = [], [], []
    for _ in range(n):
        vm = BareVm(kit, workdir, "microvm", LayerDisk(layer, "blk"))
        state = os.path.join(workdir, f"state-{uuid.uuid4().hex[:6]}")
        restored = None
        try:
            await vm.boot()
            await vm.exec("echo kept > /tmp/kept")
            t = time.perf_counter()
            await vm.machine.pause()
            await vm.machine.save_state(state)
            saves.append((time.perf_counter() - t) * 1000)
            sizes.append(os.path.getsize(state))  # noqa: ASYNC240 - after the timed save
            await vm.close()
            restored = BareVm(kit, workdir, "microvm", LayerDisk(layer, "blk"))
            restored.config.incoming = "defer"
            restored.machine = QemuMachine(NodeAgentSettings().qemu, restored.config)
            t = time.perf_counter()
            await restored.machine.launch()
            await restored.machine.load_state(state)
            await restored.machine.resume()
            restored.agent = await GuestAgentClient.connect(restored.config.agent_socket, timeout_s=60)
            assert (await restored.exec("cat /tmp/kept")).strip() == "kept"
            restores.append((time.perf_counter() - t) * 1000)
        finally:
            await vm.close()
            if restored is not None:
                await restored.close()
            with_suppress_unlink(state)
    return {"save_ms": summary(saves), "restore_to_first_exec_ms": summary(restores),
            "state_size_mb": round(sum(sizes) / len(sizes) / 2**20, 1) if sizes else None}


def with_suppress_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def qemu_memory_split(pid: int, memory_mb: int) -> dict[str, float]:
    """Where a QEMU's PSS goes (MiB): guest RAM (the anonymous mapping of the guest's size), TCG's
    code buffer (the anonymous executable mapping), QEMU's own anonymous memory (heap, stacks,
    TCG's tables), and file mappings (binary, libraries, the kernel image QEMU keeps mapped:
    page cache every VM shares, so its PSS shrinks as VMs are added)."""
    out = {"guest_ram": 0, "tcg_code": 0, "qemu_anon": 0, "files": 0}
    size_kb, perms, name = 0, "", ""
    try:
        with open(f"/proc/{pid}/smaps") as fh:
            for line in fh:
                head = line.split()
                if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                    lo, hi = (int(x, 16) for x in head[0].split("-"))
                    size_kb, perms, name = (hi - lo) // 1024, head[1], head[5] if len(head) > 5 else ""
                elif head[0] == "Pss:":
                    kb = int(head[1])
                    if name.startswith("/"):
                        out["files"] += kb
                    elif size_kb == memory_mb * 1024 and perms.startswith("rw"):
                        out["guest_ram"] += kb
                    elif "x" in perms:
                        out["tcg_code"] += kb
                    else:
                        out["qemu_anon"] += kb
    except OSError:
        pass
    return {k: round(v / 1024, 1) for k, v in out.items()}


def cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except OSError:
        return 0


def host_busy_ticks() -> tuple[int, int]:
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def ksm_counters() -> dict[str, int]:
    out = {}
    for name in ("pages_shared", "pages_sharing", "full_scans"):
        try:
            out[name] = int(Path("/sys/kernel/mm/ksm", name).read_text())
        except OSError:
            pass
    return out


def ksmd_ticks() -> int:
    pids = subprocess.run(["pgrep", "-x", "ksmd"], capture_output=True, text=True).stdout.split()
    return cpu_ticks(int(pids[0])) if pids else 0


class DensityArm:
    """How an arm of the density phase boots its VMs: ``defaults`` is the VM backend's own machine
    (MachineConfig's defaults: the TCG code buffer size, balloon with free page reporting) with the
    memory-manager's default KSM policy applied to it; ``floor`` is bare QEMU with the same kernel,
    initramfs, layer and agent and nothing Corral adds (QEMU's own TCG buffer size, no balloon, no KSM)."""

    def __init__(self, name: str):
        self.name = name
        self.ksm = None
        if name == "defaults":
            from corral_memory_manager.balloons.ksm import KsmPolicy
            from corral_memory_manager.host.service import HostMemoryService
            from corral_memory_manager.settings import MemoryManagerSettings

            mm = MemoryManagerSettings()
            if mm.ksm_policy_enabled:
                self.ksm = KsmPolicy(HostMemoryService("bench"), mm.ksm_min_same_image, mm.ksm_pages_to_scan)

    def configure(self, vm: "BareVm") -> None:
        if self.name == "floor":
            vm.config.balloon = False
            vm.config.tcg_tb_size_mb = None
            vm.machine = QemuMachine(NodeAgentSettings().qemu, vm.config)

    def vms_changed(self, count: int) -> None:
        if self.ksm is not None:
            self.ksm.apply(["busybox"] * count)  # as the memory-manager does for a node's VMs


async def density_arm(kit, workdir: str, layer: str, count: int, arm: DensityArm, settle_s: float,
                      cpu_window_s: float, min_available_mb: int) -> dict:
    drop_caches()
    await asyncio.sleep(1)
    start = meminfo()
    base = used_kb()
    machines: list[BareVm] = []
    boots, first_execs = [], []
    try:
        t = time.perf_counter()
        for _ in range(count):  # one after another: parallel TCG boots on 2 cores only queue
            if meminfo()["MemAvailable"] < min_available_mb * 1024:
                print(f"density: stopped at {len(machines)} VMs, MemAvailable below {min_available_mb} MiB",
                      file=sys.stderr)
                break
            vm = BareVm(kit, workdir, "microvm", LayerDisk(layer, "blk"))
            arm.configure(vm)
            machines.append(vm)
            b = time.perf_counter()
            await vm.boot()
            e = time.perf_counter()
            await vm.exec(["true"])
            first_execs.append((time.perf_counter() - e) * 1000)
            boots.append((time.perf_counter() - b) * 1000)
            arm.vms_changed(len(machines))
        boot_s = time.perf_counter() - t
        count = len(machines)
        # Idle: free page reporting hands freed pages back within seconds, KSM needs passes.
        await asyncio.sleep(settle_s)
        pids = [m.machine.pid for m in machines if m.machine.pid]
        ticks0, host0, ksmd0 = [cpu_ticks(p) for p in pids], host_busy_ticks(), ksmd_ticks()
        await asyncio.sleep(cpu_window_s)
        ticks1, host1, ksmd1 = [cpu_ticks(p) for p in pids], host_busy_ticks(), ksmd_ticks()
        hz = os.sysconf("SC_CLK_TCK")
        qemu_cpu_pct = [100 * (b - a) / hz / cpu_window_s for a, b in zip(ticks0, ticks1, strict=True)]
        host_cpu_pct = 100 * (host1[0] - host0[0]) / max(1, host1[1] - host0[1]) * (os.cpu_count() or 1)
        splits = [qemu_memory_split(p, 256) for p in pids]
        pss = [pss_kb(p) / 1024 for p in pids]
        delta_mb = (used_kb() - base) / 1024
        # Each idle VM answers one exec, one VM after another (as a trainer touching them in turn).
        idle_execs = []
        for m in machines:
            e = time.perf_counter()
            await m.exec(["true"])
            idle_execs.append((time.perf_counter() - e) * 1000)
        pss_each = sum(pss) / len(pss)
        cpu_each = sum(qemu_cpu_pct) / len(qemu_cpu_pct)
        return {
            "vms": count, "memory_mb": 256, "boot_all_s": round(boot_s, 1), "settle_s": settle_s,
            "boot_to_first_exec_ms": summary(boots), "first_exec_ms": summary(first_execs),
            "idle_exec_ms": summary(idle_execs),
            "idle_exec_vs_first_exec_p50": round(pct(idle_execs, 50) / pct(first_execs, 50), 2),
            "pss_per_vm_mb": round(pss_each, 1),
            "pss_split_per_vm_mb": {k: round(sum(s[k] for s in splits) / len(splits), 1) for k in splits[0]},
            "host_used_per_vm_mb": round(delta_mb / count, 1),
            "qemu_cpu_pct_per_vm_idle": round(cpu_each, 2),
            "host_cpu_pct_idle": round(host_cpu_pct, 1), "cpu_window_s": cpu_window_s,
            "ksmd_cpu_pct": round(100 * (ksmd1 - ksmd0) / hz / cpu_window_s, 1), "ksm": ksm_counters(),
            "mem_available_mb": round(start["MemAvailable"] / 1024),
            "fit_by_memory": int(start["MemAvailable"] / 1024 / pss_each),
            "fit_by_cpu": int((os.cpu_count() or 1) * 100 / cpu_each) if cpu_each > 0 else None,
        }
    finally:
        await asyncio.gather(*(m.close() for m in machines))
        arm.vms_changed(0)


async def density_phase(kit, workdir: str, layer: str, count: int, arms: list[str], settle_s: float,
                        cpu_window_s: float, extrapolate_to: int, min_available_mb: int) -> dict:
    out: dict = {}
    for name in arms:
        print(f"density: {count} idle microvms, {name} ...", file=sys.stderr)
        out[name] = await density_arm(kit, workdir, layer, count, DensityArm(name), settle_s, cpu_window_s,
                                        min_available_mb)
    # Extrapolated, not measured: N idle VMs at the measured per-VM PSS and idle CPU.
    for name in arms:
        d = out[name]
        d[f"extrapolated_{extrapolate_to}"] = {
            "host_mb": round(d["pss_per_vm_mb"] * extrapolate_to),
            "fits_in_mem_available": d["pss_per_vm_mb"] * extrapolate_to <= d["mem_available_mb"],
            "qemu_cpu_cores": round(d["qemu_cpu_pct_per_vm_idle"] * extrapolate_to / 100, 2),
        }
    return out


# ------------------------------------------------------------------------ main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boots", type=int, default=5)
    ap.add_argument("--vms", type=int, default=8)
    # ~ the size of a Debian bookworm base layer (233 MiB tree), in guests with room to cache it.
    ap.add_argument("--payload-mb", type=int, default=224, help="incompressible data in the memory phase's image")
    ap.add_argument("--memory-vm-mb", type=int, default=512, help="guest RAM in the memory phase")
    ap.add_argument("--snapshots", type=int, default=3)
    ap.add_argument("--density", type=int, default=16, help="idle microvms held at once in the density phase")
    ap.add_argument("--density-arms", default="defaults,floor", help="defaults (Corral's) and/or floor (bare QEMU)")
    ap.add_argument("--density-settle-s", type=float, default=60.0, help="idle time before measuring")
    ap.add_argument("--density-cpu-window-s", type=float, default=20.0)
    ap.add_argument("--extrapolate-to", type=int, default=500)
    ap.add_argument("--density-min-available-mb", type=int, default=4096,
                    help="stop adding VMs when the host's MemAvailable falls below this (a shared host)")
    ap.add_argument("--phases", default="boot,memory,snapshot,density")
    ap.add_argument("--base-port", type=int, default=18600)
    ap.add_argument("--redis-port", type=int, default=18679)
    ap.add_argument("--amqp-port", type=int, default=18672)
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root")
    phases = set(args.phases.split(","))
    kit = guestkit.build(NodeAgentSettings().vm.guestkit_dir)
    workdir = tempfile.mkdtemp(prefix="corral-vmbench-")
    result: dict = {
        "benchmark": "vm_backends",
        "command": " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], os.getcwd()), *sys.argv[1:]]),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {"nproc": os.cpu_count(), "kernel": platform.release(), "loadavg": os.getloadavg()[0]},
        "accelerator": detect_accelerator(), "guest_kernel": kit.kernel_version,
    }
    try:
        small = f"{workdir}/small"
        build_busybox_tree(small)
        layers = {"blk": make_layer(small, f"{workdir}/small.erofs", dax=False),
                  "dax": make_layer(small, f"{workdir}/small-dax.erofs", dax=True)}
        if "boot" in phases:
            boot: dict = {}
            state = os.path.join(workdir, "platform")
            print("boot: platform up ...", file=sys.stderr)
            info = platform_up(state, 1, args.base_port, args.redis_port, args.amqp_port)
            try:
                for backend, machine, layer in (("microvm", "microvm", LayerDisk(layers["blk"], "blk")),
                                                ("vm", "q35", LayerDisk(layers["dax"], "pmem"))):
                    print(f"boot: {backend} x{args.boots} bare and through Corral ...", file=sys.stderr)
                    corral_boots(info["api"], info["api_key"], backend, 1)  # warm: layer download, DAX copy
                    bare, corral = [], []
                    # Alternate one bare boot and one through Corral, so both see the same
                    # background load on this shared machine.
                    for _ in range(args.boots):
                        bare += asyncio.run(bare_boots(kit, workdir, machine, layer, 1))
                        corral += corral_boots(info["api"], info["api_key"], backend, 1)
                    boot[backend] = {"bare_ms": summary(bare), "corral_ms": summary(corral),
                                     "overhead_ratio": round(pct(corral, 50) / pct(bare, 50), 2)}
            finally:
                platform_down(state)
            result["boot"] = boot
        if "memory" in phases:
            print(f"memory: {args.vms} q35 VMs, pmem+DAX vs virtio-blk ...", file=sys.stderr)
            big = f"{workdir}/big"
            build_busybox_tree(big, args.payload_mb)
            big_layers = {"blk": make_layer(big, f"{workdir}/big.erofs", dax=False),
                          "dax": make_layer(big, f"{workdir}/big-dax.erofs", dax=True)}
            shutil.rmtree(big)
            result["memory"] = asyncio.run(memory_phase(kit, workdir, big_layers, args.vms, args.memory_vm_mb))
            result["memory"]["image_mb"] = args.payload_mb
            result["memory"]["guest_memory_mb"] = args.memory_vm_mb
        if "snapshot" in phases:
            print(f"snapshot: {args.snapshots} save + restore ...", file=sys.stderr)
            result["snapshot"] = asyncio.run(snapshot_phase(kit, workdir, layers["blk"], args.snapshots))
        if "density" in phases:
            result["density"] = asyncio.run(density_phase(
                kit, workdir, layers["blk"], args.density, args.density_arms.split(","), args.density_settle_s,
                args.density_cpu_window_s, args.extrapolate_to, args.density_min_available_mb))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print_table(result)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)


def print_table(r: dict) -> None:
    print(f"\nVM backends ({r['accelerator']}, guest {r['guest_kernel']}, load {r['host']['loadavg']:.1f})")
    for kind, b in r.get("boot", {}).items():
        print(f"  boot->first exec {kind:8s} corral p50 {b['corral_ms']['p50']:8.0f} ms   bare p50 "
              f"{b['bare_ms']['p50']:8.0f} ms   ratio {b['overhead_ratio']:.2f} (target <= 1.2)")
    m = r.get("memory")
    if m:
        for t in ("pmem", "blk"):
            print(f"  memory {m[t]['vms']} VMs {t:5s} host {m[t]['host_mb']:7.1f} MiB (QEMU anon {m[t]['qemu_anon_mb']:.1f}"
                  f" + image page cache {m[t]['image_page_cache_mb']:.1f}; MemFree delta {m[t]['host_used_delta_mb']:.1f})")
        print(f"  pmem+DAX saves {m.get('pmem_memory_saving_pct')}% host memory (reference: 40.2%; "
              f"{m['image_mb']} MiB image, {m['guest_memory_mb']} MiB guests)")
    s = r.get("snapshot")
    if s:
        print(f"  snapshot save p50 {s['save_ms'].get('p50')} ms ({s['state_size_mb']} MiB), "
              f"restore->first exec p50 {s['restore_to_first_exec_ms'].get('p50')} ms")
    for arm, d in r.get("density", {}).items():
        x = next(v for k, v in d.items() if k.startswith("extrapolated_"))
        print(f"  density {arm:8s}: {d['vms']} idle 256 MiB microvms, PSS {d['pss_per_vm_mb']} MiB each "
              f"{d['pss_split_per_vm_mb']}, exec p50 {d['idle_exec_ms']['p50']} ms vs first "
              f"{d['first_exec_ms']['p50']} ms ({d['idle_exec_vs_first_exec_p50']}x), QEMU CPU idle "
              f"{d['qemu_cpu_pct_per_vm_idle']}% each (host {d['host_cpu_pct_idle']}%, ksmd {d['ksmd_cpu_pct']}%) "
              f"-> fit by memory {d['fit_by_memory']}, by CPU {d['fit_by_cpu']}; extrapolated {x}")


if __name__ == "__main__":
    main()
