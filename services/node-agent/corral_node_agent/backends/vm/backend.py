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

The pieces: config.py builds a new VM's MachineConfig (layers, upper disk, overlay), qemu.py
its command line, machine.py runs QEMU and speaks QMP, boot.py waits for the guest agent
(agent_client.py), record.py is vm.json, adopt.py takes VMs over after a restart,
snapshots.py saves and restores, display.py is screen and input, balloon.py the balloon. This
module is the lifecycle: start, supervision (exit, timeout, watchdog), stop, and the data path.
"""

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import AsyncIterator, Collection

from corral_common.contracts.display import InputEvent
from corral_common.contracts.exec import ExecChunk, ExecRequest, ExecResult, FileInfo
from corral_common.contracts.memory import BalloonState
from corral_common.contracts.network import NetworkPolicy
from corral_common.contracts.sandboxes import BackendKind, RuntimeInfo, SandboxSpec, Usage
from corral_common.logging import get_logger
from corral_host.cgroups import node as node_cgroup
from corral_host.cgroups.base import Cgroup
from corral_host.cgroups.detect import cgroup_driver
from corral_host.cgroups.node import sandbox_cgroup_path
from corral_node_agent.backends.base import Capability, ExitReason, FileData, FinishedUsage, SandboxBackend
from corral_node_agent.backends.types import ImageTransport, LayerFormat, RootFs
from corral_node_agent.backends.vm import balloon, config, display, record
from corral_node_agent.backends.vm.adopt import kill_leftovers, take_over
from corral_node_agent.backends.vm.agent_client import GuestAgentClient
from corral_node_agent.backends.vm.boot import boot, console_hint
from corral_node_agent.backends.vm.machine import QemuMachine
from corral_node_agent.backends.vm.qemu import Machine, MachineConfig, detect_accelerator
from corral_node_agent.backends.vm.running import RunningVm
from corral_node_agent.backends.vm.snapshots import Snapshots
from corral_node_agent.capacity import disk
from corral_node_agent.disks.upper import UpperDisks
from corral_node_agent.errors import (
    AlreadyExists,
    BadInput,
    NodeAgentError,
    NotFound,
    RuntimeFailure,
    SandboxPaused,
    StartFailed,
    Unsupported,
)
from corral_node_agent.isolation.policy import policy_for
from corral_node_agent.network.egress import Slot, node_egress
from corral_node_agent.settings import NodeAgentSettings
from corral_node_agent.uids import VmUidPool

log = get_logger(__name__)


class QemuBackend(SandboxBackend):
    kind = BackendKind.microvm
    machine_type: Machine = "microvm"
    layer_format = LayerFormat.files
    capabilities = frozenset({Capability.pause, Capability.snapshot, Capability.adopt, Capability.balloon})

    def __init__(self, settings: NodeAgentSettings):
        self.settings = settings
        self.vm = settings.vm  # this package's own section
        self.accelerator = detect_accelerator(self.vm.accelerator)
        self.root = os.path.join(settings.state_dir, "vms")
        # Always preallocated: a guest's ext4 is out of the host's reach (its tenant is root in it),
        # so nothing could hold a thin VM disk back once the host runs short (disks/pressure.py).
        self.disks = UpperDisks(os.path.join(settings.state_dir, "upper-disks"), preallocate=True,
                                keep_free_bytes=disk.hard_reserve_bytes(settings.disk_free_reserve_mb, settings.state_dir))
        self.snapshots = Snapshots(os.path.join(settings.state_dir, "snapshots"), self.disks)
        self.egress = node_egress(settings)  # starts nothing until a VM has an allowlist
        self._vms: dict[str, RunningVm] = {}
        self._finished = FinishedUsage()
        self.uids = VmUidPool(settings)

    # ---- helpers ------------------------------------------------------------------------

    def unsupported(self, capability: Capability) -> Unsupported:
        if capability is Capability.screen:
            return Unsupported(f"{self.kind} sandboxes have no display (use backend 'vm')")
        return super().unsupported(capability)

    def _get(self, sandbox_id: str) -> RunningVm:
        vm = self._vms.get(sandbox_id)
        if vm is None or vm.stopping:
            raise NotFound(f"sandbox {sandbox_id} not found on this node", loc=["path", "sandbox_id"])
        return vm

    def _agent(self, sandbox_id: str) -> GuestAgentClient:
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

    async def _connect_agent(self, vm: RunningVm, timeout_s: float) -> GuestAgentClient:
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
            machine_config, transport = await self._config(sandbox_id, spec, rootfs, directory,
                                                           net=(net.address, net.gateway) if net else None)
            if net_fd >= 0:
                machine_config.net_fd = net_fd
            if slot is not None:
                uid = self.uids.uid(slot)
                machine_config.run_as = f"{uid}:{uid}"
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
        machine = QemuMachine(self.vm.qemu, machine_config,
                              cgroup_procs=cgroup.procs_files() if cgroup else None)
        vm = RunningVm(sandbox_id=sandbox_id, spec=spec, directory=directory, machine=machine,
                       config=machine_config, transport=transport, cgroup=cgroup, uid_slot=slot, net=net)
        self._vms[sandbox_id] = vm
        try:
            try:
                await self._boot(vm)
            finally:
                if net_fd >= 0:  # QEMU holds the tap now (or never will)
                    os.close(net_fd)
                    machine_config.net_fd = None
        except BaseException as exc:
            console = vm.machine.console_text()
            await self._teardown(vm)
            self._vms.pop(sandbox_id, None)
            if isinstance(exc, NodeAgentError) and not isinstance(exc, RuntimeFailure):
                raise  # it says what went wrong; QEMU's own failures get the console's last words
            raise StartFailed(f"{exc}{console_hint(console)}") from exc
        record.save(vm)
        self._supervise(vm)

    def _supervise(self, vm: RunningVm) -> None:
        vm.tasks.append(asyncio.create_task(self._watch(vm)))
        vm.tasks.append(asyncio.create_task(self._expire(vm)))
        if vm.agent is not None:
            vm.tasks.append(asyncio.create_task(self._watchdog(vm)))

    async def _config(self, sandbox_id: str, spec: SandboxSpec, rootfs: RootFs, directory: str,
                      net: tuple[str, str] | None = None) -> tuple[MachineConfig, ImageTransport]:
        socks = config.sockets(directory)
        if spec.from_snapshot:
            return await self.snapshots.restore_config(spec.from_snapshot, directory, socks,
                                                       machine_type=self.machine_type, kind=self.kind,
                                                       accelerator=self.accelerator)
        common = config.common_config(self.machine_type, spec, self.accelerator, socks)
        if spec.disk_image:
            return await config.disk_image_config(common, rootfs.boot_disk, directory)
        return await config.layers_config(common, sandbox_id, spec, rootfs, directory, socks,
                                          layer_format=self.layer_format, guestkit_dir=self.vm.guestkit_dir,
                                          disks=self.disks, net=net)

    async def _boot(self, vm: RunningVm) -> None:
        await boot(vm, self._connect_agent, state_file=self.snapshots.state_file(vm.spec.from_snapshot or ""),
                   timeout_s=self.vm.boot_timeout_s)

    async def _watch(self, vm: RunningVm) -> None:
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

    async def _expire(self, vm: RunningVm) -> None:
        remaining = vm.spec.timeout_s - (time.monotonic() - vm.started)
        await asyncio.sleep(max(0.0, remaining))
        await self._end(vm, ExitReason.timeout)

    async def _watchdog(self, vm: RunningVm) -> None:
        """A guest whose agent stops answering (kernel hang, agent killed) is ended, so it
        does not hold its node's memory forever looking alive."""
        agent = vm.agent
        assert agent is not None  # supervised only once connected
        interval = self.vm.watchdog_interval_s
        misses = 0
        while True:
            await asyncio.sleep(interval)
            if vm.paused or vm.stopping:
                misses = 0
                continue
            try:
                await asyncio.wait_for(agent.ping(), self.vm.watchdog_timeout_s)
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

    async def _end(self, vm: RunningVm, reason: ExitReason) -> None:
        if vm.stopping:
            return
        usage = await self._stop_vm(vm, cancel_self=True)
        self._forget(vm)
        await self._report_exit(vm.sandbox_id, reason, usage)

    def _forget(self, vm: RunningVm) -> None:
        """Drop a stopped VM; its usage stays for stop() and usage() after the end."""
        if self._vms.get(vm.sandbox_id) is vm:
            del self._vms[vm.sandbox_id]
            self._finished.add(vm.sandbox_id, vm.usage or Usage())

    async def _stop_vm(self, vm: RunningVm, cancel_self: bool = False) -> Usage:
        vm.stopping = True
        current = asyncio.current_task()
        for task in vm.tasks:
            if task is not current:
                task.cancel()
        vm.usage = self._usage_of(vm)
        await self._teardown(vm)
        return vm.usage

    async def _teardown(self, vm: RunningVm) -> None:
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

    def _usage_of(self, vm: RunningVm) -> Usage:
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
            kill_leftovers(directory)
            driver = cgroup_driver()
            if driver.available():
                for path in (sandbox_cgroup_path(self.settings.node_id, sandbox_id),
                             self._legacy_cgroup_path(sandbox_id)):
                    await asyncio.to_thread(driver.cgroup(path).remove)
            shutil.rmtree(directory, ignore_errors=True)
        return adopted

    async def _adopt(self, sandbox_id: str, directory: str) -> None:
        vm = await take_over(sandbox_id, directory, qemu=self.vm.qemu,
                             cgroup=lambda path: self._cgroup(sandbox_id, path),
                             legacy_cgroup_path=self._legacy_cgroup_path(sandbox_id), uids=self.uids,
                             connect=self._connect_agent)
        self._vms[sandbox_id] = vm
        self._supervise(vm)
        log.info("vm.adopted", sandbox_id=sandbox_id, pid=vm.machine.pid, paused=vm.paused)

    # ---- balloon (the memory-manager's lever, through the agent: the one QMP client) ----

    async def balloon(self, sandbox_id: str) -> BalloonState:
        vm = self._get(sandbox_id)
        if not vm.config.balloon:
            raise self.unsupported(Capability.balloon)
        return await balloon.read(vm)

    async def set_balloon(self, sandbox_id: str, target_mb: int) -> None:
        vm = self._get(sandbox_id)
        if not vm.config.balloon:
            raise self.unsupported(Capability.balloon)
        await balloon.set_target(vm, target_mb)

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
        return await self.snapshots.save(self._get(sandbox_id), snapshot_id, self.machine_type)

    async def delete_snapshot(self, snapshot_id: str) -> None:
        await self.snapshots.delete(snapshot_id)

    # ---- display ------------------------------------------------------------------------

    async def screenshot(self, sandbox_id: str) -> bytes:
        vm = self._get(sandbox_id)
        if not vm.config.display:
            raise self.unsupported(Capability.screen)
        return await display.screenshot(vm)

    async def send_input(self, sandbox_id: str, events: list[InputEvent]) -> None:
        vm = self._get(sandbox_id)
        if not vm.config.display:
            raise self.unsupported(Capability.screen)
        await display.send_input(vm, events)

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
    return shutil.which(settings.vm.qemu) is not None
