"""What each runtime is told a sandbox may do, pinned: the container's config.json, fncall's
bwrap arguments and host uid, QEMU's uid. Written before isolation/ existed (only the
render_* helpers changed since), so moving the decisions there provably changed none of them;
then the policy itself."""

import copy
from pathlib import Path

import pytest

from corral_common.contracts.sandboxes import SandboxSpec
from corral_node_agent.backends.container import oci
from corral_node_agent.backends.vm.backend import MicroVmBackend
from corral_node_agent.fncall.executor import ExecutorConfig, Worker
from corral_node_agent.isolation.policy import VM_PIDS_LIMIT, cpu_shares, fncall_run_policy, policy_for
from corral_node_agent.isolation.seccomp import CONTAINER_DEFAULT, FNCALL_DEFAULT, NO_FILTER
from corral_node_agent.settings import NodeAgentSettings
from corral_node_agent.uids import VmUidPool
from tests.unit.node_agent import oci_config

INIT = ["/dev/init", "-P"]
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NO_CAPS = {"bounding": [], "effective": [], "permitted": [], "inheritable": [], "ambient": []}
DEFAULT_CONFIG = {
    "ociVersion": "1.0.0",
    "process": {"terminal": False, "user": {"uid": 1000, "gid": 1000, "additionalGids": [1000]}, "args": INIT,
                "env": [PATH, "HOME=/home/user"], "cwd": "/home/user", "capabilities": NO_CAPS,
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}], "noNewPrivileges": True,
                "oomScoreAdj": 1000},
    "root": {"path": "rootfs", "readonly": False},
    "hostname": "sb-1",
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        # /dev and /dev/shm: directories of the sandbox's disk; /sys, the masked directories
        # and the init (a copy: mountinfo shows no host path): binds of the node's shared
        # mounts (a superblock each saved per sandbox).
        {"destination": "/dev", "type": "bind", "source": "/n/sandboxes/sb-1/upper/dev", "options": ["bind", "nosuid"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
        {"destination": "/dev/shm", "type": "bind", "source": "/n/sandboxes/sb-1/upper/shm",
         "options": ["bind", "nosuid", "nodev", "noexec"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev/init", "type": "bind", "source": "/n/shared/init/init", "options": ["bind", "ro", "nosuid", "nodev"]},
        {"destination": "/sys", "type": "bind", "source": "/n/shared/sysfs",
         "options": ["bind", "ro", "nosuid", "nodev", "noexec"]},
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
         "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]},
        {"destination": "/proc/acpi", "type": "bind", "source": "/n/shared/empty",
         "options": ["bind", "ro", "nosuid", "nodev", "noexec"]},
        {"destination": "/sys/firmware", "type": "bind", "source": "/n/shared/empty",
         "options": ["bind", "ro", "nosuid", "nodev", "noexec"]},
    ],
    "linux": {
        "cgroupsPath": "/corral/n1/sb-1",
        "resources": {"devices": [{"allow": False, "access": "rwm"}],
                      "memory": {"limit": 268435456, "swap": 268435456},
                      # no cpu cap (set after the start, oci.build_config), the request's weight
                      "cpu": {"shares": 2},
                      "pids": {"limit": 512}},
        "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
                       {"type": "cgroup"}],
        # The OCI/runc default, plus the host's page and slab tables, its kernel command line,
        # kernel config and memory management state. (the directories the node's shared
        # mounts know are bound over above)
        "maskedPaths": ["/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                        "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
                        "/sys/devices/virtual/powercap", "/proc/kpagecount", "/proc/kpageflags",
                        "/proc/kpagecgroup", "/proc/slabinfo", "/proc/cmdline", "/proc/config.gz",
                        "/sys/kernel/mm"],
        "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        "seccomp": CONTAINER_DEFAULT.to_oci(),  # pinned in test_container_default_profile_json
    },
}


def _settings(tmp_path, **kw) -> NodeAgentSettings:
    return NodeAgentSettings(node_id="n1", state_dir=str(tmp_path), vm_accelerator="tcg", **kw)


# ---- containers: config.json -------------------------------------------------------------


def render_config(sandbox_id: str, spec: SandboxSpec, settings: NodeAgentSettings, swap: bool) -> dict:
    return oci_config.build_config(sandbox_id, policy_for(spec, settings), env=spec.env, node_id=settings.node_id,
                            with_swap_limit=swap)


def test_default_spec_config_json(tmp_path):
    assert render_config("sb-1", SandboxSpec(environment="e"), _settings(tmp_path), True) == DEFAULT_CONFIG


def test_custom_spec_config_json(tmp_path):
    spec = SandboxSpec(environment="e", cpu=0.25, memory_mb=64, disk_mb=32, pids_limit=16, env={"A": "1"})
    want = copy.deepcopy(DEFAULT_CONFIG)
    want["hostname"] = "x" * 63
    want["process"]["env"] = [PATH, "HOME=/home/user", "A=1"]
    want["process"]["user"] = {"uid": 2000, "gid": 3000, "additionalGids": [3000]}
    want["linux"]["cgroupsPath"] = f"/corral/n1/{'x' * 100}"
    want["linux"]["resources"]["memory"] = {"limit": 64 << 20}  # no memsw on the host: no swap limit
    want["linux"]["resources"]["pids"] = {"limit": 16}
    want["linux"]["resources"]["cpu"] = {"shares": 2}  # requests left to their defaults: 0.001 core
    assert render_config("x" * 100, spec, _settings(tmp_path, sandbox_user="2000:3000"), False) == want


def test_exec_process_json(tmp_path):
    identity = policy_for(SandboxSpec(environment="e"), _settings(tmp_path)).identity
    root = oci.process_spec(["id"], identity, env=oci.build_env({"A": "1"}, {"B": "2"}), root=True)
    caps = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID",
            "CAP_NET_BIND_SERVICE"]
    assert root == {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["id"],
                    "env": [PATH, "HOME=/home/user", "A=1", "B=2"], "cwd": "/home/user",
                    "capabilities": {"bounding": caps, "effective": caps, "permitted": caps, "inheritable": [],
                                     "ambient": caps},
                    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}], "noNewPrivileges": True,
                "oomScoreAdj": 1000}
    user = oci.process_spec(["id"], identity, env=[], cwd="/tmp")
    assert user["user"] == {"uid": 1000, "gid": 1000, "additionalGids": [1000]} and user["capabilities"] == NO_CAPS


# ---- fncall: bwrap arguments and the host uid ---------------------------------------------

ROOTFS = Path("/run/corral-fncall/n1/root")
BWRAP_TAIL = ["--chdir", "/work", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
              "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/work",
              "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8", "--uid", "1000", "--gid", "1000",
              "--hostname", "corral"]


PROC_MASKS = (("/proc/keys", "/proc/cmdline"), ("/proc/acpi",))
BWRAP_HEAD = ["bwrap", "--ro-bind", str(ROOTFS), "/", "--proc", "/proc", "--dev-bind", "/dev/null", "/proc/keys",
              "--dev-bind", "/dev/null", "/proc/cmdline", "--size", "4096", "--tmpfs", "/proc/acpi",
              "--remount-ro", "/proc/acpi", "--dev", "/dev"]


def _config() -> ExecutorConfig:
    return ExecutorConfig(rootfs=ROOTFS, scratch_dir=Path("/dev/shm/x"), seccomp_path=Path("/c/s.bpf"),
                          proc_masks=PROC_MASKS)


def _worker() -> Worker:
    worker = Worker.__new__(Worker)  # no cgroup: only the argument rendering
    worker.config = _config()
    return worker


def render_bwrap(argv, *, memory_bytes: int, **kw) -> list[str]:
    return _worker()._bwrap_argv(argv, fncall_run_policy(memory_bytes >> 20, 64), **kw)


def test_bwrap_cold_run_with_files():
    got = render_bwrap(["python3", "main.py"], memory_bytes=256 << 20, bind_dir=None, seccomp_fd=5,
                       files=[("main.py", 7, False), ("lib/a/b.py", 8, False), ("run", 9, True)])
    assert got == [*BWRAP_HEAD,
                   "--size", "268435456", "--tmpfs", "/tmp", "--size", "268435456", "--perms", "0755",
                   "--tmpfs", "/work", "--perms", "0644", "--file", "7", "/work/main.py",
                   "--perms", "0755", "--dir", "/work/lib", "--perms", "0755", "--dir", "/work/lib/a",
                   "--perms", "0644", "--file", "8", "/work/lib/a/b.py", "--perms", "0755", "--file", "9", "/work/run",
                   *BWRAP_TAIL, "--seccomp", "5", "--", "python3", "main.py"]


def test_bwrap_compile_in_a_bound_dir():
    got = render_bwrap(["make"], memory_bytes=1 << 30, bind_dir=Path("/dev/shm/x/call"), files=[], seccomp_fd=5)
    assert got == [*BWRAP_HEAD,
                   "--size", "1073741824", "--tmpfs", "/tmp", "--bind", "/dev/shm/x/call", "/work",
                   *BWRAP_TAIL, "--seccomp", "5", "--", "make"]


def test_bwrap_zygote_gets_caps_and_no_filter():
    got = render_bwrap(["/usr/bin/python3", "-"], memory_bytes=128 << 20, bind_dir=None, files=[], seccomp_fd=None,
                       caps=("CAP_SYS_ADMIN", "CAP_SETPCAP"))
    assert got == [*BWRAP_HEAD,
                   "--size", "134217728", "--tmpfs", "/tmp", "--size", "134217728", "--perms", "0755",
                   "--tmpfs", "/work", *BWRAP_TAIL, "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP",
                   "--", "/usr/bin/python3", "-"]


class _Cgroup:
    def procs_files(self) -> list[str]:
        return ["m/cgroup.procs", "p/cgroup.procs", "c/cgroup.procs"]


def test_fncall_runs_as_nobody_on_the_host():
    argv = _worker()._launch_argv(["bwrap"], fncall_run_policy(256, 64), cpu_s=3, cgroup=_Cgroup())
    assert argv[4:] == ["3", "m/cgroup.procs", "p/cgroup.procs", "c/cgroup.procs", "3", str(64 * 1024 * 1024 // 512),
                        "256", str(256 * 1024), "65534", "bwrap"]


# ---- VMs: the uid QEMU drops to ------------------------------------------------------------


def qemu_uids(settings: NodeAgentSettings, n: int) -> list[int | None]:
    """The uids the first n VMs get (none released in between)."""
    uids = MicroVmBackend(settings).uids
    slots = [uids.acquire() for _ in range(n)]
    return [None if slot is None else uids.uid(slot) for slot in slots]


@pytest.mark.parametrize("base,want", [
    (0, [5_560_000, 5_560_001, 5_560_002]),  # 2_000_000 + crc32("n1") % 1000 * 10_000: per node id
    (5000, [5000, 5001, 5002]),
    (-1, [None, None, None]),
])
def test_qemu_uid(tmp_path, base, want):
    assert qemu_uids(_settings(tmp_path, vm_uid_base=base), 3) == want


# ---- the policy ---------------------------------------------------------------------------


def test_container_and_vm_policies(tmp_path):
    settings = _settings(tmp_path, vm_memory_overhead_mb=100)
    container = policy_for(SandboxSpec(environment="e", memory_mb=64, disk_mb=32, pids_limit=16, cpu=2), settings)
    assert (container.identity.uid, container.identity.host_uid) == (1000, 1000)
    assert container.syscalls == CONTAINER_DEFAULT
    assert (container.limits.memory_bytes, container.limits.pids, container.limits.cpu) == (64 << 20, 16, 2)
    assert container.disk.size_mb == 32 and container.egress.mode == "none"
    vm = policy_for(SandboxSpec(environment="e", backend="microvm", memory_mb=64, pids_limit=16), settings)
    assert vm.identity.host_uid is None  # a uid of its own, from the VM uid pool
    assert vm.syscalls == NO_FILTER  # a guest kernel of its own; QEMU runs under -sandbox
    assert (vm.limits.memory_bytes, vm.limits.pids) == (164 << 20, VM_PIDS_LIMIT)  # QEMU's overhead and threads


def test_cpu_weight_is_the_request_as_kubernetes_weighs_it(tmp_path):
    settings = _settings(tmp_path)
    shares = lambda **requests: policy_for(SandboxSpec(environment="e", requests=requests), settings).limits.cpu_shares  # noqa: E731
    assert shares() == 2  # the default request (0.001 core): the kernel's minimum
    assert shares(cpu=0.5) == 512 and shares(cpu=1) == 1024
    assert cpu_shares(1e-9) == 2 and cpu_shares(1000) == 262144  # the kernel's bounds


def test_fncall_run_policy():
    policy = fncall_run_policy(128, 32)
    assert policy.syscalls == FNCALL_DEFAULT
    assert policy.disk.size_bytes == policy.limits.memory_bytes == 128 << 20 and policy.limits.pids == 32
    assert (policy.identity.uid, policy.identity.host_uid) == (1000, 65534)


def test_vm_uid_pool_reuses_released_and_claims_adopted_slots(tmp_path):
    pool = VmUidPool(_settings(tmp_path, vm_uid_base=5000))
    assert [pool.acquire(), pool.acquire()] == [0, 1]
    pool.claim(2)  # adopted from the previous agent run
    assert pool.acquire() == 3
    pool.release(0)
    assert pool.acquire() == 0 and pool.uid(3) == 5003
