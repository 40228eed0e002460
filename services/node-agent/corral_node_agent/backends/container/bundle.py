"""A sandbox's directory: the OCI bundle crun runs, and what a restarted agent reads back.

Layout, under {state_dir}/sandboxes/<id>/ (mode 0710, group: the sandbox's host root gid,
so crun's container process, root of the sandbox's user namespace, can reach rootfs/ and
no other host user can):
    config.json     OCI bundle config
    sandbox.json    spec + wall-clock start + its disk + the user namespace's host id
                    range + its sandbox id (the directory is named by its crun id, which
                    differs when it was started ahead for the warm pool): what a restarted
                    agent needs to re-adopt it (and to claim the same ids again)
    upper.img       the sandbox's disk: an ext4 image of disk_mb (disks/upper.py)
    upper/          upper.img mounted: upper/upper + upper/work for the overlay, and
                    upper/dev + upper/shm, the sandbox's /dev and /dev/shm (oci.py), so every
                    byte written into the sandbox lands on its own disk_mb; all four belong
                    to the sandbox's root (host id = range base), made when the disk is
                    taken (a ready disk of the pool knows no range); with an allowlist,
                    upper/resolv.conf ("nameserver <its gateway>", host root's), bound
                    over /etc/resolv.conf: from its own disk, mountinfo shows it as
                    /resolv.conf, not as a path of the node's state dir
    rootfs/         overlay of the layer mounts (top first) + upper; with a user namespace
                    each layer is an idmapped clone of the node's mount (corral_host/mount_api.py), so
                    image files owned by root are owned by the sandbox's root
                    (upper/ and rootfs/ are mounted only until crun has started the
                    container: see ``detach``)
    exec/           per-exec process.json / pid files
    init.pid        the container init's host pid (crun run --pid-file)
    crun-run.log    crun run's stderr
"""

import json
import os
import shutil
import stat
import time
from dataclasses import dataclass
from typing import Any

from corral_common.contracts.sandboxes import SandboxSpec
from corral_host import mount_api, mounts
from corral_host.userns import IdRange
from corral_node_agent.backends.container import oci
from corral_node_agent.backends.paths import HOME
from corral_node_agent.disks.upper import UpperDisk, UpperDisks
from corral_node_agent.isolation.identity import Identity
from corral_node_agent.isolation.quota import DiskQuota

META = "sandbox.json"


@dataclass(frozen=True)
class BundleMeta:
    spec: SandboxSpec
    started_at: float  # time.time() when the bundle was written
    ids: IdRange | None  # its user namespace's host ids (None: started without one)
    disk: UpperDisk | None = None  # None: written by an agent whose upper was a tmpfs
    sandbox_id: str | None = None  # None: started ahead for the warm pool, never claimed


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
           disks: UpperDisks, quota: DiskQuota, identity: Identity, sandbox_id: str | None,
           userns_fd: int | None = None, nameserver: str | None = None) -> None:
    """Mount the sandbox's root (its own disk of the quota's size over the layers; HOME
    owned by the sandbox user) and write its config and metadata. With ``identity.ids``,
    ``userns_fd`` is a user namespace of that mapping: the layers are idmapped through it.
    ``sandbox_id``: as write_meta."""
    if os.path.exists(directory):
        # Leftover from a crashed attempt with the same id: never reuse its state.
        mounts.umount_tree(directory)
        shutil.rmtree(directory)
    root_uid, root_gid = identity.host_root
    os.mkdir(directory, 0o710)
    os.chown(directory, 0, root_gid)
    os.mkdir(exec_dir(directory), 0o700)
    upper = upper_dir(directory)
    rootfs = f"{directory}/rootfs"
    os.mkdir(upper, 0o700)
    os.mkdir(rootfs, 0o755)
    disk = disks.mount(disk_image(directory), upper, quota)
    populate_disk(upper, identity)
    if identity.ids is None:
        mounts.mount_overlay(lower_dirs, f"{upper}/upper", f"{upper}/work", rootfs)
    else:
        if userns_fd is None:
            raise ValueError("a user namespace sandbox needs the namespace's fd")
        mount_api.mount_overlay_idmapped(lower_dirs, upper, rootfs, userns_fd)
    _make_home(rootfs, identity)
    if nameserver:
        with open(oci.disk_resolv_conf(upper), "w") as fh:
            fh.write(f"nameserver {nameserver}\noptions attempts:1 timeout:2\n")
        os.chmod(oci.disk_resolv_conf(upper), 0o644)
    with open(f"{directory}/config.json", "w") as fh:
        json.dump(config, fh)
    write_meta(directory, spec, identity.ids, disk, sandbox_id=sandbox_id)


def write_meta(directory: str, spec: SandboxSpec, ids: IdRange | None, disk: UpperDisk | None = None, *,
               sandbox_id: str | None) -> None:
    """sandbox.json; ``sandbox_id`` None: started ahead for the warm pool, not a sandbox yet
    (never adopted as one). Rewritten when it is claimed (``disk`` None: the one
    already written stays). Written whole, then renamed: a crash never leaves half a file."""
    path = f"{directory}/{META}"
    if disk is None:
        with open(path) as fh:
            old = json.load(fh)
    meta: dict[str, Any] = {"spec": spec.model_dump(mode="json"), "started_at": time.time(),
                            "disk": disk.to_json() if disk is not None else old.get("disk")}
    if sandbox_id is None:
        meta["ahead"] = True
    else:
        meta["sandbox_id"] = sandbox_id
    if ids is not None:
        meta["userns"] = ids.to_json()
    with open(f"{path}.tmp", "w") as fh:
        json.dump(meta, fh)
    os.replace(f"{path}.tmp", path)


@dataclass
class DetachedRoot:
    """Descriptors of a running sandbox's overlay and disk once they are mounted nowhere in
    the agent's namespace: host-side file access and commit go through them."""
    root_fd: int  # the overlay's root (the merged tree, as the agent built it)
    disk_fd: int  # the disk's root (upper/upper is the writable layer)

    def close(self) -> None:
        for fd in (self.root_fd, self.disk_fd):
            try:
                os.close(fd)
            except OSError:
                pass


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def detach(directory: str) -> DetachedRoot:
    """Once crun has started the container (its own mount namespace holds its root now),
    take the sandbox's overlay and disk out of the agent's mount namespace, keeping a
    descriptor of each. Why: every later ``crun run`` copies the agent's namespace, and with
    2 mounts per running sandbox that copy grew with the node (206 ms at 4,000 mounts vs
    48 ms at 20); with these detached it holds only the sandboxes being started."""
    root_fd = os.open(f"{directory}/rootfs", _DIR)
    try:
        disk_fd = os.open(upper_dir(directory), _DIR)
    except BaseException:
        os.close(root_fd)
        raise
    detached = DetachedRoot(root_fd, disk_fd)
    try:
        mounts.detach(f"{directory}/rootfs")
        mounts.detach(upper_dir(directory))
    except BaseException:
        detached.close()
        raise
    return detached


# What crun would make in a /dev of its own (it makes nothing in a bound one, and the
# sandbox's /dev is a directory of its disk, not a tmpfs: oci.py): the devices every program
# expects, allowed by the devices cgroup (crun's default list), and the usual links.
DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0))
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("core", "/proc/kcore"), ("ptmx", "pts/ptmx"))


def populate_disk(disk_root: str, identity: Identity) -> None:
    """The directories of a freshly taken disk: the overlay's upper/ and work/, the
    sandbox's /dev (with its device nodes and links) and /dev/shm. The disk's own root stays
    host root's; all these belong to the sandbox's root (fresh, whether the disk was made
    now or kept ready by the pool)."""
    root_uid, root_gid = identity.host_root
    dev = oci.disk_dev_dir(disk_root)
    for path, mode in ((f"{disk_root}/upper", 0o755), (f"{disk_root}/work", 0o700), (dev, 0o755),
                       (oci.disk_shm_dir(disk_root), 0o1777), (f"{dev}/pts", 0o755), (f"{dev}/mqueue", 0o755)):
        os.mkdir(path)
        os.chown(path, root_uid, root_gid)
        os.chmod(path, mode)  # (mkdir applies the umask)
    for name, major, minor in DEVICES:
        os.mknod(f"{dev}/{name}", 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chown(f"{dev}/{name}", root_uid, root_gid)
        os.chmod(f"{dev}/{name}", 0o666)  # noqa: S103 - /dev/null and co. are for everyone
    for name, target in DEV_LINKS:
        os.symlink(target, f"{dev}/{name}")
        os.chown(f"{dev}/{name}", root_uid, root_gid, follow_symlinks=False)


def _make_home(rootfs: str, identity: Identity) -> None:
    """HOME for the sandbox user when the image has none (its parents belong to the sandbox's root)."""
    path = rootfs
    parts = HOME.strip("/").split("/")
    for i, name in enumerate(parts):
        path = f"{path}/{name}"
        if os.path.islink(path):
            return  # the image's own (followed host-side it could lead anywhere)
        if os.path.lexists(path):
            continue
        os.mkdir(path, 0o755)
        owner = (identity.host_uid, identity.host_gid) if i == len(parts) - 1 else identity.host_root
        os.chown(path, *owner, follow_symlinks=False)


def read_meta(directory: str) -> BundleMeta:
    """Raises OSError, ValueError, KeyError or TypeError when it is missing or not ours."""
    with open(f"{directory}/{META}") as fh:
        meta = json.load(fh)
    ids = IdRange.from_json(meta["userns"]) if meta.get("userns") is not None else None
    disk = UpperDisk.from_json(meta["disk"]) if meta.get("disk") else None
    # (written before the warm pool: the directory's name is the sandbox's id)
    # compat(6778a69, 2026-12-03): the basename fallback goes 7 days (the longest timeout_s) after
    # every node runs 6778a69 or later (no container an older agent started can still run).
    sandbox_id = None if meta.get("ahead") else str(meta.get("sandbox_id") or os.path.basename(directory))
    return BundleMeta(spec=SandboxSpec.model_validate(meta["spec"]), started_at=float(meta["started_at"]), ids=ids,
                      disk=disk, sandbox_id=sandbox_id)


def read_init_pid(directory: str) -> int:
    with open(init_pid_file(directory)) as fh:
        return int(fh.read().strip())


def delete(directory: str) -> None:
    """rm -rf the bundle, but only ever a tree with nothing mounted below it."""
    if not any(m.startswith(directory + "/") or m == directory for m in mounts.mountpoints()):
        shutil.rmtree(directory, ignore_errors=True)
