"""Taking over the VMs a previous run of the node-agent left running (QEMU lives in its own
session and survives the agent): read back its vm.json (record.py), reattach to its QEMU's
QMP and console, claim its uid slot again and reconnect to its guest agent."""

import contextlib
import os
import time
from collections.abc import Callable

from corral_common.contracts.sandboxes import SandboxSpec
from corral_host.cgroups.base import Cgroup
from corral_node_agent.backends.types import ImageTransport
from corral_node_agent.backends.vm import record
from corral_node_agent.backends.vm.boot import ConnectAgent
from corral_node_agent.backends.vm.machine import QemuMachine
from corral_node_agent.backends.vm.running import RunningVm
from corral_node_agent.errors import StartFailed
from corral_node_agent.uids import VmUidPool


async def take_over(sandbox_id: str, directory: str, *, qemu: str, cgroup: Callable[[str], Cgroup | None],
                    legacy_cgroup_path: str, uids: VmUidPool, connect: ConnectAgent) -> RunningVm:
    """The running VM in ``directory``; StartFailed when its QEMU is gone. ``cgroup(path)``
    opens the cgroup its QEMU already runs in."""
    saved, config = record.load(directory)
    pid = saved["pid"]
    if pid not in qemu_pids_using(directory):
        raise StartFailed("its QEMU is gone")
    # Same path: the running QEMU is already in it (agents from before the node cgroup wrote none:
    # compat(53beb59, 2026-12-01), the fallback goes with QemuBackend._legacy_cgroup_path).
    vm_cgroup = cgroup(saved.get("cgroup") or legacy_cgroup_path)
    slot = saved.get("uid_slot")
    if slot is not None:
        uids.claim(slot)
    vm = RunningVm(sandbox_id=sandbox_id, spec=SandboxSpec.model_validate(saved["spec"]), directory=directory,
                   machine=QemuMachine(qemu, config), config=config,
                   transport=ImageTransport(saved["transport"]), cgroup=vm_cgroup, uid_slot=slot,
                   started=time.monotonic() - (time.time() - saved["started_wall"]))
    try:
        await vm.machine.adopt(pid)
        vm.paused = (await vm.machine.status()) == "paused"
        if config.agent_socket and not vm.paused:
            vm.agent = await connect(vm, 10)
    except BaseException:
        await vm.machine.close_channels()
        if slot is not None:
            uids.release(slot)
        raise
    return vm


def kill_leftovers(directory: str) -> None:
    """SIGKILL every QEMU still using ``directory`` (a VM that is not taken over)."""
    for pid in qemu_pids_using(directory):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


def qemu_pids_using(directory: str) -> list[int]:
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
