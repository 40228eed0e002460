"""A VM's MachineConfig on disk: ``vm.json`` in its directory (what a restarted node-agent
needs to take it over, adopt.py) and the ``config`` of a snapshot's ``snapshot.json``
(snapshots.py). One schema for both: the fields each keeps are listed here, side by side."""

import json
import os
import time
from typing import Any

from corral_node_agent.backends.vm.qemu import LayerDisk, MachineConfig
from corral_node_agent.backends.vm.running import RunningVm

RECORD_FILE = "vm.json"

# What vm.json keeps of a running VM's config (its sockets included: adoption reconnects to them).
RECORD_FIELDS = ("machine", "memory_mb", "cpus", "accelerator", "qmp_socket", "console_socket", "kernel",
                 "initramfs", "cmdline", "agent_socket", "upper_disk", "boot_disk", "boot_disk_format", "display",
                 "balloon", "run_as")
# What a snapshot keeps: no sockets, accelerator or uid (the restoring VM brings its own), and
# ``agent_socket`` only as whether there was one.
SNAPSHOT_FIELDS = ("machine", "memory_mb", "cpus", "kernel", "initramfs", "cmdline", "display", "balloon",
                   "upper_disk", "boot_disk", "boot_disk_format")


def config_to_json(config: MachineConfig, fields: tuple[str, ...]) -> dict[str, Any]:
    out = {name: getattr(config, name) for name in fields}
    out["layers"] = [{"path": layer.path, "transport": layer.transport} for layer in config.layers]
    return out


def layers_from_json(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of a stored config with its layers as LayerDisk again (MachineConfig's keywords)."""
    out = dict(data)
    out["layers"] = [LayerDisk(**layer) for layer in out.get("layers", [])]
    return out


def save(vm: RunningVm) -> None:
    """Write vm.json (atomically: a crash leaves the old one or the new one)."""
    record = {"pid": vm.machine.pid, "spec": vm.spec.model_dump(mode="json"),
              "config": config_to_json(vm.config, RECORD_FIELDS),
              "transport": vm.transport, "uid_slot": vm.uid_slot,
              "cgroup": vm.cgroup.path if vm.cgroup is not None else None,
              "started_wall": time.time() - (time.monotonic() - vm.started)}
    tmp = os.path.join(vm.directory, RECORD_FILE + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(record, fh)
    os.rename(tmp, os.path.join(vm.directory, RECORD_FILE))


def load(directory: str) -> tuple[dict[str, Any], MachineConfig]:
    """vm.json of the VM in ``directory``: the record and its MachineConfig."""
    with open(os.path.join(directory, RECORD_FILE)) as fh:
        record = json.load(fh)
    return record, MachineConfig(**layers_from_json(record["config"]))
