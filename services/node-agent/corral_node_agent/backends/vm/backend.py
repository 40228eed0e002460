"""QEMU sandboxes: `microvm` (minimal machine, direct kernel boot) and `vm` (q35 with a display).

A VM sandbox is one QEMU process in its own cgroup (memory capped at guest RAM + QEMU's
overhead, pids capped), with no network device, booting the node's guest kit (kernel +
initramfs) whose init stacks the sandbox's EROFS layers under its writable disk (an ext4
image of disk_mb in the VM's directory, isolation/quota.py, attached read-write) and starts
the Corral guest agent on a virtio-serial port. Commands and files go through that agent, so the
data path is the same HTTP/SDK surface as containers; the host never mounts a guest's disk.

Layers reach the guest read-only: `vm` (q35) maps them with virtio-pmem from an uncompressed
copy and the guest mounts them with DAX, so N VMs share one copy in the host page cache;
`microvm` (QEMU 7.2's microvm has no memory hotplug slots for pmem) attaches the layer files
as read-only virtio-blk disks.
"""

import asyncio
import contextlib
import json
import os
import shutil
import struct
import subprocess
import time
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from typing import Any

from qemu.qmp import ExecuteError

from corral_common.contracts.display import InputEvent
from corral_common.contracts.exec import ExecChunk, ExecRequest, ExecResult, FileInfo
from corral_common.contracts.memory import BalloonState, GuestMemoryStats
from corral_common.contracts.network import NetworkPolicy
from corral_common.contracts.sandboxes import BackendKind, RuntimeInfo, SandboxSpec, Usage
from corral_common.logging import get_logger
from corral_host.cgroups import node as node_cgroup
from corral_host.cgroups.base import Cgroup
from corral_host.cgroups.detect import cgroup_driver
from corral_host.cgroups.node import sandbox_cgroup_path
from corral_node_agent.backends.base import Capability, ExitReason, FileData, FinishedUsage, SandboxBackend
from corral_node_agent.backends.types import ImageTransport, LayerFormat, RootFs
from corral_node_agent.backends.vm import keyboard
from corral_node_agent.backends.vm.agent_client import GuestAgentClient
from corral_node_agent.backends.vm.guestkit import GuestKit, kernel_cmdline
from corral_node_agent.backends.vm.input import to_qmp
from corral_node_agent.backends.vm.machine import MachineError, QemuMachine
from corral_node_agent.backends.vm.qemu import (
    UPPER_SERIAL,
    LayerDevice,
    LayerDisk,
    Machine,
    MachineConfig,
    detect_accelerator,
    guest_lowers,
)
from corral_node_agent.disks.upper import UpperDisks, sparse_copy
from corral_node_agent.errors import (
    AlreadyExists,
    BadInput,
    NodeAgentError,
    NotFound,
    RuntimeFailure,
    SandboxPaused,
    StartFailed,
    Unavailable,
    Unsupported,
)
from corral_node_agent.isolation.policy import policy_for
from corral_node_agent.isolation.quota import disk_quota
from corral_node_agent.network.egress import Slot, node_egress
from corral_node_agent.settings import NodeAgentSettings
from corral_node_agent.uids import VmUidPool

log = get_logger(__name__)

MIB = 1024 * 1024

STATE_FILE = "state.bin"
META_FILE = "snapshot.json"
UPPER_FILE = "upper.img"
SNAPSHOT_FORMAT = 1
# How a layer in each format is attached, and what the record then says (vm: until the
# guest tells whether DAX worked).
_LAYER_ATTACHMENT = {LayerFormat.files: (LayerDevice.blk, ImageTransport.virtio_blk),
                     LayerFormat.dax_files: (LayerDevice.pmem, ImageTransport.virtio_pmem_dax)}


@dataclass
class _Vm:
    sandbox_id: str
    spec: SandboxSpec
    directory: str
    machine: QemuMachine
    config: MachineConfig
    transport: ImageTransport
    agent: Any = None  # GuestAgentClient; None for user disk images (no Corral agent inside)
    cgroup: Cgroup | None = None
    started: float = field(default_factory=time.monotonic)
    paused: bool = False
    stopping: bool = False
    usage: Usage | None = None
    screen: tuple[int, int] = (0, 0)
    tasks: list[asyncio.Task] = field(default_factory=list)
    uid_slot: int | None = None
    net: Slot | None = None  # an egress allowlist's namespace (network/egress.py); None: no NIC


def _png_size(data: bytes) -> tuple[int, int]:
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return (0, 0)
    return struct.unpack(">II", data[16:24])


class QemuBackend(SandboxBackend):
    kind = BackendKind.microvm
    machine_type: Machine = "microvm"
    layer_format = LayerFormat.files
    capabilities = frozenset({Capability.pause, Capability.snapshot, Capability.adopt, Capability.balloon})

    def __init__(self, settings: NodeAgentSettings):
        self.settings = settings
        self.accelerator = detect_accelerator(settings.vm_accelerator)
        self.root = os.path.join(settings.state_dir, "vms")
        self.snapshots_dir = os.path.join(settings.state_dir, "snapshots")
        self.disks = UpperDisks(os.path.join(settings.state_dir, "upper-disks"), preallocate=settings.disk_preallocate)
        self.egress = node_egress(settings)  # starts nothing until a VM has an allowlist
        self._vms: dict[str, _Vm] = {}
        self._finished = FinishedUsage()
        self.uids = VmUidPool(settings)

    # ---- helpers ------------------------------------------------------------------------

    def unsupported(self, capability: Capability) -> Unsupported:
        if capability is Capability.screen:
            return Unsupported(f"{self.kind} sandboxes have no display (use backend 'vm')")
        return super().unsupported(capability)

    def _get(self, sandbox_id: str) -> _Vm:
        vm = self._vms.get(sandbox_id)
        if vm is None or vm.stopping:
            raise NotFound(f"sandbox {sandbox_id} not found on this node", loc=["path", "sandbox_id"])
        return vm

    def _agent(self, sandbox_id: str) -> Any:
        vm = self._get(sandbox_id)
        if not vm.config.agent_socket:
            raise Unsupported("this VM boots a user disk image: it has no Corral guest agent, "
                              "use its screen and input instead")
        if vm.paused or vm.agent is None:
            # The agent cannot answer while the guest is stopped: files wait too (not so for containers).
            raise SandboxPaused(f"sandbox {sandbox_id} is paused", loc=["path", "sandbox_id"])
        return vm.agent

    def _cgroup(self, sandbox_id: str, path: str | None = None) -> Cgroup | None:
        # memory/pids/cpu accounting per VM, the same cgroups the fncall workers get, below
        # the node's cgroup (its caps hold QEMU's threads and memory too).
        driver = cgroup_driver()
        if not driver.available():
            return None
        return driver.cgroup(path or sandbox_cgroup_path(self.settings.node_id, sandbox_id)).create()

    def _legacy_cgroup_path(self, sandbox_id: str) -> str:
        # Where agents from before the node cgroup put a VM (vm.json without "cgroup").
        # compat(53beb59, 2026-12-01): delete (and its two callers' fallbacks) 7 days (the longest
        # timeout_s) after every node runs 53beb59 or later: no VM an older agent started can still run.
        return f"corral-vm/{self.settings.node_id}/{sandbox_id}"

    async def _connect_agent(self, vm: _Vm, timeout_s: float) -> Any:
        # The spec's env applies to every command; output and upload caps as for containers.
        return await GuestAgentClient.connect(vm.config.agent_socket or "", timeout_s=timeout_s, env=vm.spec.env,
                                              output_limit_bytes=self.settings.output_limit_bytes,
                                              max_upload_bytes=self.settings.max_upload_bytes)

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self, sandbox_id: str, spec: SandboxSpec, rootfs: RootFs) -> None:
        if sandbox_id in self._vms:
            raise AlreadyExists(f"sandbox {sandbox_id} already exists")
        self._finished.pop(sandbox_id, None)
        directory = os.path.join(self.root, sandbox_id)
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory, mode=0o700)
        policy = policy_for(spec, self.settings)
        net: Slot | None = None
        net_fd = -1
        if policy.egress.mode != "none":
            if spec.disk_image or spec.from_snapshot:
                # Only the guest kit's init configures the NIC (corral.net=).
                raise BadInput("network allowlists need a VM booted from layers (not disk_image or from_snapshot)",
                               loc=["body", "network"])
            net = await self.egress.attach(sandbox_id, policy.egress.policy)
            try:
                net_fd = await self.egress.tap(sandbox_id)
            except BaseException:
                await self.egress.detach(sandbox_id)
                raise
        slot = self.uids.acquire() if policy.identity.host_uid is None else None
        try:
            config, transport = self._config(sandbox_id, spec, rootfs, directory,
                                             net=(net.address, net.gateway) if net else None)
            if net_fd >= 0:
                config.net_fd = net_fd
            if slot is not None:
                uid = self.uids.uid(slot)
                config.run_as = f"{uid}:{uid}"
                # QEMU writes screenshots here after dropping to its uid; nobody else can enter.
                os.chown(directory, uid, uid)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            if slot is not None:
                self.uids.release(slot)
            if net is not None:
                os.close(net_fd)
                await self.egress.detach(sandbox_id)
            raise
        cgroup = self._cgroup(sandbox_id)
        if cgroup is not None:
            cgroup.set_limits(policy.limits.memory_bytes, policy.limits.pids)
            cgroup.reset_counters()
        machine = QemuMachine(self.settings.qemu, config,
                              cgroup_procs=cgroup.procs_files() if cgroup else None)
        vm = _Vm(sandbox_id=sandbox_id, spec=spec, directory=directory, machine=machine, config=config,
                 transport=transport, cgroup=cgroup, uid_slot=slot, net=net)
        self._vms[sandbox_id] = vm
        try:
            try:
                await self._boot(vm)
            finally:
                if net_fd >= 0:  # QEMU holds the tap now (or never will)
                    os.close(net_fd)
                    config.net_fd = None
        except BaseException as exc:
            console = vm.machine.console_text()
            await self._teardown(vm)
            self._vms.pop(sandbox_id, None)
            if isinstance(exc, NodeAgentError) and not isinstance(exc, RuntimeFailure):
                raise  # it says what went wrong; QEMU's own failures get the console's last words
            raise StartFailed(f"{exc}{self._console_hint(console)}") from exc
        self._save_record(vm)
        self._supervise(vm)

    def _supervise(self, vm: _Vm) -> None:
        vm.tasks.append(asyncio.create_task(self._watch(vm)))
        vm.tasks.append(asyncio.create_task(self._expire(vm)))
        if vm.agent is not None:
            vm.tasks.append(asyncio.create_task(self._watchdog(vm)))

    def _save_record(self, vm: _Vm) -> None:
        """What a restarted node-agent needs to take this VM over (vm.json in its directory)."""
        config = {k: getattr(vm.config, k) for k in (
            "machine", "memory_mb", "cpus", "accelerator", "qmp_socket", "console_socket", "kernel", "initramfs",
            "cmdline", "agent_socket", "upper_disk", "boot_disk", "boot_disk_format", "display", "balloon", "run_as")}
        config["layers"] = [{"path": layer.path, "transport": layer.transport} for layer in vm.config.layers]
        record = {"pid": vm.machine.pid, "spec": vm.spec.model_dump(mode="json"), "config": config,
                  "transport": vm.transport, "uid_slot": vm.uid_slot,
                  "cgroup": vm.cgroup.path if vm.cgroup is not None else None,
                  "started_wall": time.time() - (time.monotonic() - vm.started)}
        tmp = os.path.join(vm.directory, "vm.json.tmp")
        with open(tmp, "w") as fh:
            json.dump(record, fh)
        os.rename(tmp, os.path.join(vm.directory, "vm.json"))

    @staticmethod
    def _console_hint(console: str) -> str:
        for line in console.splitlines():
            if "CORRAL-INIT-ERROR" in line:
                return f" ({line.strip()})"
        tail = console.strip().splitlines()[-3:]
        return f" (console: {' | '.join(tail)})" if tail else ""

    def _config(self, sandbox_id: str, spec: SandboxSpec, rootfs: RootFs,
                directory: str, net: tuple[str, str] | None = None) -> tuple[MachineConfig, ImageTransport]:
        sockets = {name: os.path.join(directory, f"{name}.sock") for name in ("qmp", "console", "agent")}
        if spec.from_snapshot:
            return self._restore_config(spec.from_snapshot, directory, sockets)
        common = dict(machine=self.machine_type, memory_mb=spec.memory_mb, cpus=max(1, round(spec.cpu)),
                      accelerator=self.accelerator, qmp_socket=sockets["qmp"], console_socket=sockets["console"],
                      display=self.machine_type == "q35")
        if spec.disk_image:
            disk = rootfs.boot_disk
            if disk is None:
                raise StartFailed("no disk image was given to boot")
            overlay = os.path.join(directory, "disk.qcow2")
            # Writes land in a per-sandbox overlay; the cached image is shared and never written.
            subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", disk.path, "-F", disk.format, overlay],
                           check=True, capture_output=True)
            return MachineConfig(**common, boot_disk=overlay, boot_disk_format="qcow2"), ImageTransport.disk_image

        kit = GuestKit.load(self.settings.guestkit_dir)
        device, transport = _LAYER_ATTACHMENT[self.layer_format]
        layers = [LayerDisk(path=p, transport=device) for p in reversed(rootfs.layers)]  # base first
        upper = self.disks.make(os.path.join(directory, UPPER_FILE), disk_quota(spec)).image
        cmdline = kernel_cmdline(lowers=guest_lowers(layers), upper_disk=UPPER_SERIAL, net=net,
                                 hostname=sandbox_id, tty_shell=self.machine_type == "q35",
                                 tcg=self.accelerator == "tcg")
        # The raw vmlinux (PVH entry, faster) skips the real-mode setup that finds the VGA
        # text console: a machine with a screen boots the bzImage.
        kernel = kit.display_kernel if common["display"] and kit.display_kernel else kit.kernel
        config = MachineConfig(**common, kernel=kernel, initramfs=kit.initramfs, cmdline=cmdline,
                               agent_socket=sockets["agent"], layers=layers, upper_disk=upper)
        return config, transport

    def _restore_config(self, snapshot_id: str, directory: str,
                        sockets: dict[str, str]) -> tuple[MachineConfig, ImageTransport]:
        snap_dir = os.path.join(self.snapshots_dir, snapshot_id)
        try:
            with open(os.path.join(snap_dir, META_FILE)) as fh:
                meta = json.load(fh)
        except FileNotFoundError:
            raise NotFound(f"snapshot {snapshot_id} is not on this node", loc=["body", "from_snapshot"]) from None
        if meta.get("format") != SNAPSHOT_FORMAT or meta["machine"] != self.machine_type:
            raise StartFailed(f"snapshot {snapshot_id} is not a {self.kind} snapshot of this version")
        cfg = dict(meta["config"])
        cfg["layers"] = [LayerDisk(**layer) for layer in cfg.get("layers", [])]
        for layer in cfg["layers"]:
            if not os.path.exists(layer.path):
                raise StartFailed(f"layer file {layer.path} of snapshot {snapshot_id} is gone")
        if cfg.get("boot_disk"):
            overlay = os.path.join(directory, "disk.qcow2")
            shutil.copyfile(os.path.join(snap_dir, "disk.qcow2"), overlay)
            cfg["boot_disk"] = overlay
        if cfg.get("upper_disk"):  # snapshots of VMs whose upper was a tmpfs have it in their memory
            cfg["upper_disk"] = os.path.join(directory, UPPER_FILE)
            self.disks.copy(os.path.join(snap_dir, UPPER_FILE), cfg["upper_disk"])
        cfg.update(qmp_socket=sockets["qmp"], console_socket=sockets["console"], accelerator=self.accelerator,
                   agent_socket=sockets["agent"] if cfg.get("agent_socket") else None, incoming="defer")
        return MachineConfig(**cfg), ImageTransport(meta["transport"])

    async def _boot(self, vm: _Vm) -> None:

        await vm.machine.launch()
        if vm.config.incoming:
            await vm.machine.load_state(os.path.join(self.snapshots_dir, vm.spec.from_snapshot or "", STATE_FILE))
            await vm.machine.resume()
        if vm.config.agent_socket:
            connect = asyncio.ensure_future(self._connect_agent(vm, self.settings.vm_boot_timeout_s))
            died = asyncio.ensure_future(vm.machine.wait())
            done, _ = await asyncio.wait({connect, died}, return_when=asyncio.FIRST_COMPLETED)
            if connect not in done:
                connect.cancel()
                raise StartFailed(f"the VM stopped while booting (qemu exit {died.result()})"
                                   f"{self._console_hint(vm.machine.console_text())}")
            died.cancel()
            vm.agent = connect.result()
            if vm.transport is ImageTransport.virtio_pmem_dax:
                vm.transport = await self._pmem_mode(vm)
            if vm.config.display and not vm.config.incoming:
                await self._wait_for_console_shell(vm, self.settings.vm_boot_timeout_s)

    # The guest agent starts `sh -i` on tty1; until it reads its terminal, typed keys are lost.
    _CONSOLE_SHELL_STATE = (
        "for p in /proc/[0-9]*; do [ \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" = 'sh -i ' ] && "
        "cat $p/wchan && echo; done")

    async def _wait_for_console_shell(self, vm: _Vm, timeout_s: float) -> None:
        """Report a display VM running only once its console shell waits for keys (ash polls its tty),
        so input sent right after creation reaches it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            res = await vm.agent.exec(ExecRequest(cmd=self._CONSOLE_SHELL_STATE, user="root", timeout_s=10))
            if any(w in res.stdout for w in ("do_sys_poll", "n_tty_read", "wait_woken")):
                return
            await asyncio.sleep(0.05)
        log.warning("vm.console_shell_not_ready", sandbox_id=vm.sandbox_id)

    @staticmethod
    async def _pmem_mode(vm: _Vm) -> ImageTransport:
        """What the guest's init managed: DAX, or pmem without DAX (it falls back, and says
        so in /.corral/layers: "<index> <device> dax|pmem|blk" per layer)."""
        try:
            status = (await vm.agent.read_file("/.corral/layers")).decode()
        except Exception:  # noqa: BLE001 - an unreadable status file means the guest fell back: report plain pmem
            return ImageTransport.virtio_pmem
        modes = {line.split()[2] for line in status.splitlines() if len(line.split()) == 3}
        return ImageTransport.virtio_pmem_dax if modes == {"dax"} else ImageTransport.virtio_pmem

    async def _watch(self, vm: _Vm) -> None:
        """The QEMU process ended on its own: the guest powered off, panicked or QEMU died."""
        await vm.machine.wait()
        if vm.stopping:
            return
        console = vm.machine.console_text()
        if "Kernel panic" in console or vm.machine.shutdown_reason in ("guest-panic", "guest-reset"):
            reason = ExitReason.guest_panic
        elif vm.cgroup is not None and vm.cgroup.stats().oom_killed:
            reason = ExitReason.oom_killed
        else:
            reason = ExitReason.exited
        log.info("vm.ended", sandbox_id=vm.sandbox_id, reason=str(reason), shutdown=vm.machine.shutdown_reason)
        await self._end(vm, reason)

    async def _expire(self, vm: _Vm) -> None:
        remaining = vm.spec.timeout_s - (time.monotonic() - vm.started)
        await asyncio.sleep(max(0.0, remaining))
        await self._end(vm, ExitReason.timeout)

    async def _watchdog(self, vm: _Vm) -> None:
        """A guest whose agent stops answering (kernel hang, agent killed) is ended, so it
        does not hold its node's memory forever looking alive."""
        interval = self.settings.vm_watchdog_interval_s
        misses = 0
        while True:
            await asyncio.sleep(interval)
            if vm.paused or vm.stopping:
                misses = 0
                continue
            try:
                await asyncio.wait_for(vm.agent.ping(), self.settings.vm_watchdog_timeout_s)
                misses = 0
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - any failed ping counts as a miss
                if vm.paused or vm.stopping:
                    continue
                misses += 1
                if misses >= 2:
                    log.warning("vm.unresponsive", sandbox_id=vm.sandbox_id)
                    await self._end(vm, ExitReason.guest_unresponsive)
                    return

    async def _end(self, vm: _Vm, reason: ExitReason) -> None:
        if vm.stopping:
            return
        usage = await self._stop_vm(vm, cancel_self=True)
        self._forget(vm)
        await self._report_exit(vm.sandbox_id, reason, usage)

    def _forget(self, vm: _Vm) -> None:
        """Drop a stopped VM; its usage stays for stop() and usage() after the end."""
        if self._vms.get(vm.sandbox_id) is vm:
            del self._vms[vm.sandbox_id]
            self._finished.add(vm.sandbox_id, vm.usage or Usage())

    async def _stop_vm(self, vm: _Vm, cancel_self: bool = False) -> Usage:
        vm.stopping = True
        current = asyncio.current_task()
        for task in vm.tasks:
            if task is not current:
                task.cancel()
        vm.usage = self._usage_of(vm)
        await self._teardown(vm)
        return vm.usage

    async def _teardown(self, vm: _Vm) -> None:
        if vm.agent is not None:
            with contextlib.suppress(Exception):
                await vm.agent.close()
        await vm.machine.kill()
        if vm.net is not None and self.egress.is_attached(vm.sandbox_id):
            await self.egress.detach(vm.sandbox_id)
        if vm.cgroup is not None:
            await asyncio.to_thread(vm.cgroup.remove)
        shutil.rmtree(vm.directory, ignore_errors=True)
        if vm.uid_slot is not None:
            self.uids.release(vm.uid_slot)
            vm.uid_slot = None

    async def stop(self, sandbox_id: str) -> Usage:
        vm = self._vms.get(sandbox_id)
        if vm is None:
            return self._finished.get(sandbox_id, Usage())
        if not vm.stopping:
            await self._stop_vm(vm)
        self._forget(vm)
        return vm.usage or Usage()

    def _usage_of(self, vm: _Vm) -> Usage:
        net = self.egress.last_counters(vm.sandbox_id)
        usage = Usage(wall_time_s=time.monotonic() - vm.started, network_tx_bytes=net.get("tx_bytes", 0),
                      network_rx_bytes=net.get("rx_bytes", 0), network_denied=net.get("denied", 0))
        if vm.cgroup is not None:
            with contextlib.suppress(OSError):
                stats = vm.cgroup.stats()
                usage.cpu_seconds = stats.cpu_ns / 1e9
                usage.peak_memory_bytes = stats.peak_memory_bytes
                usage.oom_kills = stats.oom_kills
        return usage

    def usage(self, sandbox_id: str) -> Usage:
        vm = self._vms.get(sandbox_id)
        if vm is None:
            if sandbox_id in self._finished:
                return self._finished[sandbox_id]
            raise NotFound(f"sandbox {sandbox_id} not found")
        return vm.usage if vm.usage is not None else self._usage_of(vm)

    def list_running(self) -> list[str]:
        return [sid for sid, vm in self._vms.items() if not vm.stopping]

    async def close(self) -> None:
        await super().close()
        await self.egress.close()
        # As the container backend's close: the node's cgroup goes once nothing is left in it
        # (a node running VMs only would otherwise leave an empty /corral/<node> behind).
        driver = cgroup_driver()
        if driver.available() and not self._vms:
            node_cgroup.prune(driver, self.settings.node_id)

    async def set_network(self, sandbox_id: str, network: NetworkPolicy) -> None:
        vm = self._vms.get(sandbox_id)
        if vm is None or vm.stopping:
            raise NotFound(f"sandbox {sandbox_id} not found")
        if vm.net is None or not self.egress.is_attached(sandbox_id):
            raise BadInput(f"sandbox {sandbox_id} was created with network 'none': it has no NIC to open", loc=["body"])
        await self.egress.update(sandbox_id, network)
        vm.spec = vm.spec.model_copy(update={"network": network})

    def spec_of(self, sandbox_id: str) -> SandboxSpec:
        return self._get(sandbox_id).spec

    def is_paused(self, sandbox_id: str) -> bool:
        vm = self._vms.get(sandbox_id)
        return bool(vm and vm.paused)

    def describe(self, sandbox_id: str) -> RuntimeInfo:
        vm = self._get(sandbox_id)
        return {"machine": self.machine_type, "accelerator": self.accelerator, "image_transport": vm.transport,
                "agent": "corral" if vm.config.agent_socket else "none",
                "qemu_user": vm.config.run_as or "root"}

    async def cleanup_orphans(self, adopt: bool = False, pooled: Collection[str] = ()) -> list[str]:
        """What a previous run of the agent left: with ``adopt``, take over the VMs whose QEMU
        still runs (QEMU lives in its own session and survives the agent); kill the rest
        and remove their files and cgroups."""
        if not os.path.isdir(self.root):  # noqa: ASYNC240 - one stat of a local dir at start
            return []
        adopted = []
        for sandbox_id in sorted(os.listdir(self.root)):
            directory = os.path.join(self.root, sandbox_id)
            if adopt:
                try:
                    await self._adopt(sandbox_id, directory)
                    adopted.append(sandbox_id)
                    continue
                except Exception as exc:  # noqa: BLE001 - a VM that cannot be adopted is killed below, never fatal to the agent
                    log.warning("vm.adopt_failed", sandbox_id=sandbox_id, error=str(exc))
            for pid in _qemu_pids_using(directory):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            driver = cgroup_driver()
            if driver.available():
                for path in (sandbox_cgroup_path(self.settings.node_id, sandbox_id),
                             self._legacy_cgroup_path(sandbox_id)):
                    await asyncio.to_thread(driver.cgroup(path).remove)
            shutil.rmtree(directory, ignore_errors=True)
        return adopted

    async def _adopt(self, sandbox_id: str, directory: str) -> None:

        with open(os.path.join(directory, "vm.json")) as fh:  # noqa: ASYNC230 - a small local file at adoption
            record = json.load(fh)
        pid = record["pid"]
        if pid not in _qemu_pids_using(directory):
            raise StartFailed("its QEMU is gone")
        cfg = dict(record["config"])
        cfg["layers"] = [LayerDisk(**layer) for layer in cfg["layers"]]
        config = MachineConfig(**cfg)
        # Same path: the running QEMU is already in it.
        cgroup = self._cgroup(sandbox_id, record.get("cgroup") or self._legacy_cgroup_path(sandbox_id))
        slot = record.get("uid_slot")
        if slot is not None:
            self.uids.claim(slot)
        vm = _Vm(sandbox_id=sandbox_id, spec=SandboxSpec.model_validate(record["spec"]), directory=directory,
                 machine=QemuMachine(self.settings.qemu, config), config=config,
                 transport=ImageTransport(record["transport"]),
                 cgroup=cgroup, uid_slot=slot,
                 started=time.monotonic() - (time.time() - record["started_wall"]))
        try:
            await vm.machine.adopt(pid)
            vm.paused = (await vm.machine.status()) == "paused"
            if config.agent_socket and not vm.paused:
                vm.agent = await self._connect_agent(vm, 10)
        except BaseException:
            await vm.machine.close_channels()
            if slot is not None:
                self.uids.release(slot)
            raise
        self._vms[sandbox_id] = vm
        self._supervise(vm)
        log.info("vm.adopted", sandbox_id=sandbox_id, pid=pid, paused=vm.paused)

    # ---- balloon (the memory-manager's lever, through the agent: the one QMP client) ----

    async def balloon(self, sandbox_id: str) -> BalloonState:
        vm = self._get(sandbox_id)
        if not vm.config.balloon:
            raise self.unsupported(Capability.balloon)
        try:
            actual, stats = await vm.machine.balloon_stats()
        except ExecuteError as exc:  # e.g. adopted from an agent that gave the balloon no id
            raise Unsupported(f"the VM's balloon cannot be read: {exc}") from exc
        return BalloonState(sandbox_id=sandbox_id, environment=vm.spec.environment,
                            memory_mb=vm.config.memory_mb, actual_mb=actual / MIB,
                            guest=guest_memory_stats(stats))

    async def set_balloon(self, sandbox_id: str, target_mb: int) -> None:
        vm = self._get(sandbox_id)
        if not vm.config.balloon:
            raise self.unsupported(Capability.balloon)
        await vm.machine.set_balloon(min(target_mb, vm.config.memory_mb) * MIB)

    # ---- pause / snapshot ---------------------------------------------------------------

    async def pause(self, sandbox_id: str) -> None:
        vm = self._get(sandbox_id)
        if not vm.paused:
            await vm.machine.pause()
            vm.paused = True

    async def resume(self, sandbox_id: str) -> None:
        vm = self._get(sandbox_id)
        if vm.paused:
            await vm.machine.resume()
            vm.paused = False
        if vm.agent is None and vm.config.agent_socket:
            # Adopted while paused: its agent could not answer until now.

            vm.agent = await self._connect_agent(vm, 10)
            vm.tasks.append(asyncio.create_task(self._watchdog(vm)))

    async def snapshot(self, sandbox_id: str, snapshot_id: str) -> int:
        vm = self._get(sandbox_id)
        snap_dir = os.path.join(self.snapshots_dir, snapshot_id)
        if os.path.exists(snap_dir):  # noqa: ASYNC240 - one local stat
            raise AlreadyExists(f"snapshot {snapshot_id} exists")
        tmp_dir = snap_dir + ".tmp"
        shutil.rmtree(tmp_dir, ignore_errors=True)
        os.makedirs(tmp_dir, mode=0o700)
        was_paused = vm.paused
        vm.paused = True  # the watchdog must not take a stopped guest for a hung one
        try:
            await vm.machine.pause()
            await vm.machine.save_state(os.path.join(tmp_dir, STATE_FILE))
            if vm.config.boot_disk:
                await asyncio.to_thread(shutil.copyfile, vm.config.boot_disk, os.path.join(tmp_dir, "disk.qcow2"))
            if vm.config.upper_disk:
                await asyncio.to_thread(sparse_copy, vm.config.upper_disk, os.path.join(tmp_dir, UPPER_FILE))
            cfg = {k: getattr(vm.config, k) for k in ("machine", "memory_mb", "cpus", "kernel", "initramfs", "cmdline",
                                                        "display", "balloon", "upper_disk", "boot_disk",
                                                        "boot_disk_format")}
            cfg["layers"] = [{"path": layer.path, "transport": layer.transport} for layer in vm.config.layers]
            cfg["agent_socket"] = bool(vm.config.agent_socket)
            cfg["qmp_socket"] = cfg["console_socket"] = ""
            meta = {"format": SNAPSHOT_FORMAT, "machine": self.machine_type, "transport": vm.transport,
                    "sandbox_id": sandbox_id, "created_at": time.time(), "config": cfg}
            with open(os.path.join(tmp_dir, META_FILE), "w") as fh:  # noqa: ASYNC230 - a small local file
                json.dump(meta, fh)
            os.rename(tmp_dir, snap_dir)
        except MachineError as exc:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise Unavailable(f"snapshot failed: {exc}") from exc
        except BaseException:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
        finally:
            if not was_paused and not vm.stopping:
                await vm.machine.resume()
                vm.paused = False
        # What it takes on disk (the upper's copy is sparse).
        return sum(os.stat(os.path.join(snap_dir, f)).st_blocks * 512 for f in os.listdir(snap_dir))  # noqa: ASYNC240 - a few local stats

    async def delete_snapshot(self, snapshot_id: str) -> None:
        snap_dir = os.path.join(self.snapshots_dir, snapshot_id)
        if not os.path.isdir(snap_dir):  # noqa: ASYNC240 - one local stat
            raise NotFound(f"snapshot {snapshot_id} is not on this node")
        await asyncio.to_thread(shutil.rmtree, snap_dir, True)

    # ---- display ------------------------------------------------------------------------

    async def screenshot(self, sandbox_id: str) -> bytes:
        vm = self._get(sandbox_id)
        if not vm.config.display:
            raise self.unsupported(Capability.screen)
        path = os.path.join(vm.directory, "screen.png")
        try:
            await vm.machine.screendump(path)
            with open(path, "rb") as fh:  # noqa: ASYNC230 - a small local file
                data = fh.read()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        vm.screen = _png_size(data)
        return data

    async def send_input(self, sandbox_id: str, events: list[InputEvent]) -> None:
        vm = self._get(sandbox_id)
        if not vm.config.display:
            raise self.unsupported(Capability.screen)
        if vm.screen == (0, 0) and any(getattr(e, "x", None) is not None for e in events):
            await self.screenshot(sandbox_id)  # learn the resolution to scale pointer positions
        try:
            await keyboard.send_paced(vm.machine.send_input, to_qmp(events, vm.screen), self._keyboard_irqs(vm))
        except ExecuteError as exc:  # QEMU refuses what it cannot map (an unknown key name)
            raise BadInput(f"input refused: {exc}", loc=["body", "events"]) from exc

    @staticmethod
    def _keyboard_irqs(vm: _Vm) -> keyboard.KeyboardIrqs | None:
        """How the guest tells us it read the keys (see keyboard.py); None without our agent."""
        if vm.agent is None or not vm.agent.connected:
            return None
        agent = vm.agent

        async def count() -> int | None:
            try:
                return keyboard.parse_keyboard_irqs((await agent.read_file("/proc/interrupts")).decode())
            except Exception:  # noqa: BLE001 - the guest cannot say: pace by time from here on
                return None
        return count

    # ---- data path ----------------------------------------------------------------------

    async def exec(self, sandbox_id: str, req: ExecRequest) -> ExecResult:
        return await self._agent(sandbox_id).exec(req)

    async def exec_stream(self, sandbox_id: str, req: ExecRequest) -> AsyncIterator[ExecChunk]:
        async for chunk in self._agent(sandbox_id).exec_stream(req):
            yield chunk

    async def write_file(self, sandbox_id: str, path: str, data: FileData, mode: int = 0o644) -> int:
        return await self._agent(sandbox_id).write_file(path, data, mode)

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        return await self._agent(sandbox_id).read_file(path)

    async def open_file(self, sandbox_id: str, path: str) -> tuple[int, AsyncIterator[bytes]]:
        return await self._agent(sandbox_id).open_file(path)

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        return await self._agent(sandbox_id).stat(path)

    async def list_dir(self, sandbox_id: str, path: str) -> list[FileInfo]:
        return await self._agent(sandbox_id).list_dir(path)


def _qemu_pids_using(directory: str) -> list[int]:
    """PIDs of QEMU processes whose command line names a file under directory."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().decode(errors="replace")
        except OSError:
            continue
        if "qemu-system" in cmdline and directory + "/" in cmdline:
            pids.append(int(entry))
    return pids


class MicroVmBackend(QemuBackend):
    kind = BackendKind.microvm
    machine_type: Machine = "microvm"
    layer_format = LayerFormat.files


class FullVmBackend(QemuBackend):
    kind = BackendKind.vm
    machine_type: Machine = "q35"
    layer_format = LayerFormat.dax_files
    capabilities = QemuBackend.capabilities | {Capability.screen}


def qemu_available(settings: NodeAgentSettings) -> bool:
    return shutil.which(settings.qemu) is not None


def guest_memory_stats(report: dict) -> GuestMemoryStats:
    """QEMU's ``guest-stats`` (bytes, -1 for what the guest does not report) in MiB."""
    stats = report.get("stats", {})

    def value(key: str, scale: float = MIB) -> float | None:
        raw = stats.get(key, -1)
        return None if raw is None or raw < 0 else raw / scale

    def count(key: str) -> int | None:
        raw = stats.get(key, -1)
        return None if raw is None or raw < 0 else int(raw)

    return GuestMemoryStats(total_mb=value("stat-total-memory"), free_mb=value("stat-free-memory"),
                            available_mb=value("stat-available-memory"), disk_caches_mb=value("stat-disk-caches"),
                            swap_in=count("stat-swap-in"), swap_out=count("stat-swap-out"),
                            major_faults=count("stat-major-faults"), last_update=int(report.get("last-update", 0)))
