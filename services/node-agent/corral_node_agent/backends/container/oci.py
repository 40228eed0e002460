"""OCI runtime config (config.json / process.json) for a sandbox, built in Python.

Based on `crun spec` defaults; the differences are what make it a sandbox: writable root,
no network, cgroup limits, an unprivileged user without capabilities. What the sandbox may
do is the policy's (isolation/policy.py): this module only renders it.
"""

import base64
from typing import Any

from corral_node_agent.backends.container.shared_mounts import SharedMounts
from corral_node_agent.backends.paths import HOME, ROOT_HOME
from corral_node_agent.isolation import procfs
from corral_node_agent.isolation.identity import Identity
from corral_node_agent.isolation.policy import SANDBOX_OOM_SCORE_ADJ, SandboxPolicy

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# PID 1 in the sandbox: the node's catatonit (Debian's package, a static binary: the node
# setting container_init; its node-wide copy, shared_mounts.py), bound read-only at INIT_PATH
# and run in pause mode: it idles and
# reaps. Commands are `crun exec`'d into the sandbox, so their orphans are re-parented to
# PID 1, which reaps them: zombies never pile up against pids_limit. One process per idle
# sandbox (the shell loop it replaced, `while :; do sleep 3600 & wait; done`, was two), and
# nothing asked of the image: one without /bin/sh starts too.
INIT_PATH = "/dev/init"
INIT_ARGS = [INIT_PATH, "-P"]


def _caps(names: tuple[str, ...]) -> dict[str, list[str]]:
    return {k: list(names) for k in ("bounding", "effective", "permitted")} | {"inheritable": [], "ambient": list(names)}


def build_env(spec_env: dict[str, str], extra: dict[str, str] | None = None, *, root: bool = False) -> list[str]:
    """A process's environment: the sandbox's, then the request's; a command run as root gets
    root's home (as a login would, and as E2B's envd does) unless the request names one."""
    env = {"PATH": DEFAULT_PATH, "HOME": HOME, **spec_env, **({"HOME": ROOT_HOME} if root else {}), **(extra or {})}
    return [f"{k}={v}" for k, v in env.items()]


def process_spec(
    args: list[str], identity: Identity, *, env: list[str], cwd: str = HOME, root: bool = False
) -> dict[str, Any]:
    """The sandbox user without capabilities, or (``root``) root with the identity's root capabilities."""
    uid, gid = identity.uid, identity.gid
    return {
        "terminal": False,
        "user": {"uid": 0, "gid": 0} if root else {"uid": uid, "gid": gid, "additionalGids": [gid]},
        "args": args,
        "env": env,
        "cwd": cwd,
        "capabilities": _caps(identity.root_capabilities if root else ()),
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
        "noNewPrivileges": True,
        "oomScoreAdj": SANDBOX_OOM_SCORE_ADJ,  # the OOM killer's first choice, not the node's services
    }


def hostname_of(sandbox_id: str) -> str:
    # sethostname(2) takes at most 64 bytes; ids may be longer.
    return sandbox_id[:63]


def cgroup_path(node_id: str, sandbox_id: str) -> str:
    return f"/corral/{node_id}/{sandbox_id}"


# crun loads this annotation's program as is (crun.1: "experimental"), so that it does not
# compile the JSON profile on every create; the profile's name goes along for the reader.
SECCOMP_BPF_ANNOTATION = "run.oci.seccomp_bpf_data"
SECCOMP_PROFILE_ANNOTATION = "org.corral.seccomp.profile"


def disk_dev_dir(disk_root: str) -> str:
    """The directory of a sandbox's disk that is its /dev."""
    return f"{disk_root}/dev"


def disk_shm_dir(disk_root: str) -> str:
    """The directory of a sandbox's disk that is its /dev/shm."""
    return f"{disk_root}/shm"


def disk_resolv_conf(disk_root: str) -> str:
    """The file of a sandbox's disk bound over its /etc/resolv.conf (with an allowlist)."""
    return f"{disk_root}/resolv.conf"


_BIND_RO = ["bind", "ro", "nosuid", "nodev", "noexec"]


def build_config(
    sandbox_id: str, policy: SandboxPolicy, *, env: dict[str, str], node_id: str, disk_root: str,
    shared: SharedMounts, with_swap_limit: bool = True,
    seccomp_bpf: bytes | None = None, userns_path: str | None = None, cgroups_path: str | None = None,
    netns_path: str | None = None, resolv_conf: str | None = None,
) -> dict[str, Any]:
    """``shared``: the node's shared mounts (shared_mounts.py), its init (INIT_ARGS) among them.
    ``seccomp_bpf``: the policy's syscall profile already compiled (SyscallFilter.to_bpf),
    given to crun in its place. Without it, ``linux.seccomp``: crun compiles that (the same
    rules, its linear layout) on every create, ~5 ms, and each exec parses it again, ~0.6 ms.
    A runtime that ignored the annotation would run the sandbox unfiltered: the backend checks
    that crun holds the program after the start (Crun.seccomp_program).
    ``userns_path``: the user namespace crun joins when the policy has one (a fresh one per
    sandbox, corral_host/userns.py `UserNamespace`); without it crun would make its own. ``cgroups_path``: the cgroup driver's
    `Cgroup.runtime_path` (default: the node's tree at the hierarchy's root).
    ``netns_path``: an allowlist's network namespace, made by the node (network/egress.py),
    joined instead of a fresh empty one; ``resolv_conf`` is bound read-only over
    /etc/resolv.conf (the node's resolver for this sandbox).

    Filesystems: each one a sandbox mounts is a superblock, and superblocks are what limits
    how many sandboxes a node holds (shared_mounts.py says why). So /dev and /dev/shm are
    directories of the sandbox's own disk (``disk_root``: mounted there until the start,
    bundle.py), bound, not two tmpfs: what the sandbox writes there counts against its
    disk_mb, as everything else it writes; the masked directories and (without a network)
    /sys are binds of the node's ``shared`` mounts. What stays per sandbox: its disk, its
    overlay, proc (its pid namespace), devpts (its ptys), mqueue (made with its ipc
    namespace anyway) and crun's tmpfs under /sys/fs/cgroup."""
    limits = policy.limits
    mem_res: dict[str, Any] = {"limit": limits.memory_bytes}
    if with_swap_limit:
        # OCI "swap" is memory+swap (v1's memsw): equal to the limit means no swap at all. On
        # cgroup v2 crun writes memory.swap.max = swap - limit = 0, the same thing.
        mem_res["swap"] = limits.memory_bytes
    resources: dict[str, Any] = {"devices": [{"allow": False, "access": "rwm"}], "memory": mem_res}
    # No cpu cap here: the backend caps the cgroup right after the start (ContainerBackend._run_init),
    # with its burst, which crun does not set. A cap from crun would hold crun's own setup in
    # the sandbox's cgroup (namespaces, mounts, pivot_root, seccomp: a few ms of cpu, and far
    # more under host memory pressure, whose direct reclaim is charged to the task): at cpu 0.01
    # a start waited out 2 periods of 100 ms on a quiet host, 8 in a density run, and one
    # there, under memory pressure, over 5 minutes.
    # Its weight under contention is set here, though (shares hold nothing back while the
    # cores are free): its cpu request's (isolation/policy.py cpu_shares).
    resources["cpu"] = {"shares": limits.cpu_shares}
    resources["pids"] = {"limit": limits.pids}
    linux: dict[str, Any] = {
        "cgroupsPath": cgroups_path or cgroup_path(node_id, sandbox_id),
        "resources": resources,
        # Egress "none" (isolation/network.py): a fresh network namespace holds only a down
        # `lo`; an allowlist joins the node-made one by path. A cgroup namespace:
        # /proc/self/cgroup and the cgroup mounts show "/", not the node's cgroup path.
        "namespaces": [{"type": t, "path": netns_path} if t == "network" and netns_path else {"type": t}
                       for t in ("pid", "network", "ipc", "uts", "mount", "cgroup")],
        # What shows of the host kernel (isolation/procfs.py); the syscall profile
        # (isolation/seccomp.py) comes below, applied by crun to the init and every exec.
        "maskedPaths": [p for p in procfs.MASKED_PATHS if p not in shared.masked_dirs],
        "readonlyPaths": list(procfs.READONLY_PATHS),
    }
    ids = policy.identity.ids
    if netns_path is None:
        sysfs = {"destination": "/sys", "type": "bind", "source": shared.sysfs, "options": [*_BIND_RO]}
    else:
        sysfs = {"destination": "/sys", "type": "sysfs", "source": "sysfs",
                 "options": ["nosuid", "noexec", "nodev", "ro"]}
    if ids is not None:
        # A user namespace of its own (corral_host/userns.py), the maps already written; crun
        # still reads them (owners of /dev, /dev/shm...).
        linux["namespaces"].append({"type": "user", "path": userns_path} if userns_path else {"type": "user"})
        for key in ("uidMappings", "gidMappings"):
            linux[key] = [{"containerID": 0, "hostID": ids.host_base, "size": ids.size}]
    seccomp = policy.syscalls.to_oci()
    if seccomp is not None and seccomp_bpf is None:
        linux["seccomp"] = seccomp
    config: dict[str, Any] = {
        "ociVersion": "1.0.0",
        "process": process_spec(INIT_ARGS, policy.identity, env=build_env(env)),
        "root": {"path": "rootfs", "readonly": False},
        "hostname": hostname_of(sandbox_id),
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "bind", "source": disk_dev_dir(disk_root),
             "options": ["bind", "nosuid"]},  # its device nodes: bundle.py (crun makes none in a bound /dev)
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
            {"destination": "/dev/shm", "type": "bind", "source": disk_shm_dir(disk_root),  # noqa: S108 - a mount point inside the container
             "options": ["bind", "nosuid", "nodev", "noexec"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": INIT_PATH, "type": "bind", "source": shared.init, "options": ["bind", "ro", "nosuid", "nodev"]},
            sysfs,
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
             "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]},
            *({"destination": path, "type": "bind", "source": shared.empty, "options": [*_BIND_RO]}
              for path in shared.masked_dirs),
        ],
        "linux": linux,
    }
    if resolv_conf:
        config["mounts"].append({"destination": "/etc/resolv.conf", "type": "bind", "source": resolv_conf,
                                 "options": [*_BIND_RO]})
    if seccomp is not None and seccomp_bpf is not None:
        config["annotations"] = {SECCOMP_BPF_ANNOTATION: base64.b64encode(seccomp_bpf).decode(),
                                 SECCOMP_PROFILE_ANNOTATION: policy.syscalls.name}
    return config
