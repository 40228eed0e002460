"""VM snapshots on the node's disk: {state_dir}/snapshots/<id>/ holds QEMU's saved state
(state.bin), copies of the VM's writable disks, and snapshot.json (the machine it needs,
record.py's schema). A VM restored from one is started with its saved config, new sockets
and copies of its disks, and QEMU waiting for the state (incoming="defer")."""

import asyncio
import json
import os
import shutil
import time

from corral_node_agent.backends.types import ImageTransport
from corral_node_agent.backends.vm import record
from corral_node_agent.backends.vm.config import OVERLAY_FILE, UPPER_FILE
from corral_node_agent.backends.vm.machine import MachineError
from corral_node_agent.backends.vm.qemu import Accelerator, Machine, MachineConfig
from corral_node_agent.backends.vm.running import RunningVm
from corral_node_agent.disks.upper import UpperDisks, sparse_copy
from corral_node_agent.errors import AlreadyExists, NotFound, StartFailed, Unavailable

STATE_FILE = "state.bin"
META_FILE = "snapshot.json"
SNAPSHOT_FORMAT = 1


class Snapshots:
    def __init__(self, directory: str, disks: UpperDisks):
        self.directory = directory
        self.disks = disks

    def state_file(self, snapshot_id: str) -> str:
        return os.path.join(self.directory, snapshot_id, STATE_FILE)

    async def save(self, vm: RunningVm, snapshot_id: str, machine_type: Machine) -> int:
        """Pause the VM, save its state and disks (resumed after unless it was paused);
        returns what the snapshot takes on disk."""
        snap_dir = os.path.join(self.directory, snapshot_id)
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
                await asyncio.to_thread(shutil.copyfile, vm.config.boot_disk, os.path.join(tmp_dir, OVERLAY_FILE))
            if vm.config.upper_disk:
                await asyncio.to_thread(sparse_copy, vm.config.upper_disk, os.path.join(tmp_dir, UPPER_FILE))
            cfg = record.config_to_json(vm.config, record.SNAPSHOT_FIELDS)
            cfg["agent_socket"] = bool(vm.config.agent_socket)
            cfg["qmp_socket"] = cfg["console_socket"] = ""
            meta = {"format": SNAPSHOT_FORMAT, "machine": machine_type, "transport": vm.transport,
                    "sandbox_id": vm.sandbox_id, "created_at": time.time(), "config": cfg}
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

    async def delete(self, snapshot_id: str) -> None:
        snap_dir = os.path.join(self.directory, snapshot_id)
        if not os.path.isdir(snap_dir):  # noqa: ASYNC240 - one local stat
            raise NotFound(f"snapshot {snapshot_id} is not on this node")
        await asyncio.to_thread(shutil.rmtree, snap_dir, True)

    async def restore_config(self, snapshot_id: str, directory: str, socks: dict[str, str], *,
                             machine_type: Machine, kind: str,
                             accelerator: Accelerator) -> tuple[MachineConfig, ImageTransport]:
        """The config of a VM restored from ``snapshot_id`` into ``directory`` (its disks copied
        there, in a thread: they can be large)."""
        snap_dir = os.path.join(self.directory, snapshot_id)
        try:
            with open(os.path.join(snap_dir, META_FILE)) as fh:  # noqa: ASYNC230 - a small local file
                meta = json.load(fh)
        except FileNotFoundError:
            raise NotFound(f"snapshot {snapshot_id} is not on this node", loc=["body", "from_snapshot"]) from None
        if meta.get("format") != SNAPSHOT_FORMAT or meta["machine"] != machine_type:
            raise StartFailed(f"snapshot {snapshot_id} is not a {kind} snapshot of this version")
        cfg = record.layers_from_json(meta["config"])
        for layer in cfg["layers"]:
            if not os.path.exists(layer.path):  # noqa: ASYNC240 - a few local stats
                raise StartFailed(f"layer file {layer.path} of snapshot {snapshot_id} is gone")
        if cfg.get("boot_disk"):
            overlay = os.path.join(directory, OVERLAY_FILE)
            await asyncio.to_thread(shutil.copyfile, os.path.join(snap_dir, OVERLAY_FILE), overlay)
            cfg["boot_disk"] = overlay
        if cfg.get("upper_disk"):  # snapshots of VMs whose upper was a tmpfs have it in their memory
            cfg["upper_disk"] = os.path.join(directory, UPPER_FILE)
            await asyncio.to_thread(self.disks.copy, os.path.join(snap_dir, UPPER_FILE), cfg["upper_disk"])
        cfg.update(qmp_socket=socks["qmp"], console_socket=socks["console"], accelerator=accelerator,
                   agent_socket=socks["agent"] if cfg.get("agent_socket") else None, incoming="defer")
        return MachineConfig(**cfg), ImageTransport(meta["transport"])
