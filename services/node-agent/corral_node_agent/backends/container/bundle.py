"""A sandbox's directory: the OCI bundle crun runs, and what a restarted agent reads back.

Layout, under {state_dir}/sandboxes/<id>/:
    config.json     OCI bundle config
    sandbox.json    spec + wall-clock start: what a restarted agent needs to re-adopt it
    upper.img       the sandbox's disk: an ext4 image of disk_mb (isolation/quota.py)
    upper/          upper.img mounted: upper/upper + upper/work for the overlay, so every
                    byte written into the sandbox lands on its own disk_mb
    rootfs/         overlay of the layer mounts (top first) + upper
    exec/           per-exec process.json / pid files
    init.pid        the container init's host pid (crun run --pid-file)
    crun-run.log    crun run's stderr
"""

import json
import os
import shutil
import time
from dataclasses import dataclass
from typing import Any

from corral_common.sandboxes import SandboxSpec
from corral_node_agent import host
from corral_node_agent.backends.paths import HOME
from corral_node_agent.isolation.quota import DiskQuota, UpperDisk, UpperDisks

META = "sandbox.json"


@dataclass(frozen=True)
class BundleMeta:
    spec: SandboxSpec
    started_at: float  # time.time() when the bundle was written
    disk: UpperDisk | None = None  # None: written by an agent whose upper was a tmpfs


def init_pid_file(directory: str) -> str:
    return f"{directory}/init.pid"


def run_log(directory: str) -> str:
    return f"{directory}/crun-run.log"


def exec_dir(directory: str) -> str:
    return f"{directory}/exec"


def upper_dir(directory: str) -> str:
    return f"{directory}/upper"


def disk_image(directory: str) -> str:
    return f"{directory}/upper.img"


def create(directory: str, spec: SandboxSpec, lower_dirs: list[str], config: dict[str, Any], *,
           disks: UpperDisks, quota: DiskQuota, uid: int, gid: int) -> None:
    """Mount the sandbox's root (its own disk of the quota's size over the layers; HOME
    owned by uid:gid) and write its config and metadata."""
    if os.path.exists(directory):
        # Leftover from a crashed attempt with the same id: never reuse its state.
        host.umount_tree(directory)
        shutil.rmtree(directory)
    os.makedirs(exec_dir(directory), mode=0o700)
    upper = upper_dir(directory)
    rootfs = f"{directory}/rootfs"
    os.mkdir(upper, 0o700)
    os.mkdir(rootfs, 0o755)
    disk = disks.mount(disk_image(directory), upper, quota)
    os.mkdir(f"{upper}/upper", 0o755)
    os.mkdir(f"{upper}/work", 0o700)
    host.mount_overlay(lower_dirs, f"{upper}/upper", f"{upper}/work", rootfs)
    home = f"{rootfs}{HOME}"
    if not os.path.lexists(home):
        os.makedirs(home, 0o755, exist_ok=True)
        os.chown(home, uid, gid)
    with open(f"{directory}/config.json", "w") as fh:
        json.dump(config, fh)
    with open(f"{directory}/{META}", "w") as fh:
        json.dump({"spec": spec.model_dump(mode="json"), "started_at": time.time(), "disk": disk.to_json()}, fh)


def read_meta(directory: str) -> BundleMeta:
    """Raises OSError, ValueError, KeyError or TypeError when it is missing or not ours."""
    with open(f"{directory}/{META}") as fh:
        meta = json.load(fh)
    disk = UpperDisk.from_json(meta["disk"]) if meta.get("disk") else None
    return BundleMeta(spec=SandboxSpec.model_validate(meta["spec"]), started_at=float(meta["started_at"]), disk=disk)


def read_init_pid(directory: str) -> int:
    with open(init_pid_file(directory)) as fh:
        return int(fh.read().strip())


def delete(directory: str) -> None:
    """rm -rf the bundle, but only ever a tree with nothing mounted below it."""
    if not any(m.startswith(directory + "/") or m == directory for m in host.mountpoints()):
        shutil.rmtree(directory, ignore_errors=True)
