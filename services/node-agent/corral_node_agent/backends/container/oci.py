"""OCI runtime config (config.json / process.json) for a sandbox, built in Python.

Based on `crun spec` defaults; the differences are what make it a sandbox: writable root,
no network, cgroup limits, an unprivileged user without capabilities.
"""

from typing import Any

from corral_common.sandboxes import SandboxSpec
from corral_node_agent.backends.paths import HOME

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CPU_PERIOD = 100_000

# PID 1 in the sandbox: idles and reaps. Commands are `crun exec`'d into the sandbox, so
# their orphans are re-parented to PID 1; ash's `wait` reaps any child (waitpid(-1)), so
# zombies never pile up against pids_limit. The long sleep keeps idle sandboxes free.
INIT_ARGS = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done"]

# What a `user: root` exec gets (docker-like, minus anything touching the host); the
# sandbox user gets none.
ROOT_CAPS = [
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
    "CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE",
]

MASKED_PATHS = [
    "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
]
READONLY_PATHS = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]


def _caps(names: list[str]) -> dict[str, list[str]]:
    return {k: list(names) for k in ("bounding", "effective", "permitted")} | {"inheritable": [], "ambient": list(names)}


def build_env(spec_env: dict[str, str], extra: dict[str, str] | None = None) -> list[str]:
    env = {"PATH": DEFAULT_PATH, "HOME": HOME, **spec_env, **(extra or {})}
    return [f"{k}={v}" for k, v in env.items()]


def process_spec(
    args: list[str], *, uid: int, gid: int, env: list[str], cwd: str = HOME, root: bool = False
) -> dict[str, Any]:
    return {
        "terminal": False,
        "user": {"uid": 0, "gid": 0} if root else {"uid": uid, "gid": gid, "additionalGids": [gid]},
        "args": args,
        "env": env,
        "cwd": cwd,
        "capabilities": _caps(ROOT_CAPS if root else []),
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
        "noNewPrivileges": True,
    }


def cgroup_path(node_id: str, sandbox_id: str) -> str:
    return f"/corral/{node_id}/{sandbox_id}"


def build_config(
    sandbox_id: str, spec: SandboxSpec, *, node_id: str, uid: int, gid: int, with_swap_limit: bool = True
) -> dict[str, Any]:
    memory = spec.memory_mb * 1024 * 1024
    mem_res: dict[str, Any] = {"limit": memory}
    if with_swap_limit:
        # On v1 "swap" is memory+swap: equal to the limit means no swap at all.
        mem_res["swap"] = memory
    return {
        "ociVersion": "1.0.0",
        "process": process_spec(INIT_ARGS, uid=uid, gid=gid, env=build_env(spec.env)),
        "root": {"path": "rootfs", "readonly": False},
        # sethostname(2) takes at most 64 bytes; ids may be longer.
        "hostname": sandbox_id[:63],
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
             "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]},
        ],
        "linux": {
            "cgroupsPath": cgroup_path(node_id, sandbox_id),
            "resources": {
                "devices": [{"allow": False, "access": "rwm"}],
                "memory": mem_res,
                "cpu": {"quota": int(spec.cpu * CPU_PERIOD), "period": CPU_PERIOD},
                "pids": {"limit": spec.pids_limit},
            },
            # A fresh network namespace holds only a down `lo`: no network at all.
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "maskedPaths": list(MASKED_PATHS),
            "readonlyPaths": list(READONLY_PATHS),
        },
    }
