"""What a sandbox may do, decided once: `policy_for(spec, settings)` for sandboxes,
`fncall_run_policy(...)` for one fncall run.

A `SandboxPolicy` is frozen and made of one part per knob, each defined in its own module:
`Identity` (userns.py), `SyscallFilter` (seccomp.py), `DiskQuota` (quota.py), `Egress`
(network.py) and `Limits` (here). Each runtime renders it into its own configuration and
decides nothing itself: the container backend into config.json (backends/container/oci.py),
the VM backends into QEMU's uid and cgroup (backends/vm/backend.py), fncall into bwrap
arguments, its cgroup and the seccomp program (fncall/executor.py, zygote.py). A new knob is
a new module here and one render step per runtime. What shows of the host's /proc is the
same for every kind sharing the host kernel, so it is no part of the policy: procfs.py.
"""

from dataclasses import dataclass

from corral_common.contracts.sandboxes import VM_BACKENDS, SandboxSpec, pids_max, reserved_memory_mb
from corral_common.contracts.sandboxes import VM_PIDS_LIMIT as VM_PIDS_LIMIT  # QEMU's threads (re-exported)
from corral_host.userns import IdRange
from corral_node_agent.isolation.identity import FNCALL_IDENTITY, VM_IDENTITY, Identity, container_identity
from corral_node_agent.isolation.network import NO_EGRESS, Egress, egress_for
from corral_node_agent.isolation.quota import MIB, DiskQuota, disk_quota
from corral_node_agent.isolation.seccomp import CONTAINER_DEFAULT, FNCALL_DEFAULT, NO_FILTER, SyscallFilter
from corral_node_agent.settings import NodeAgentSettings

# Every fncall run's syscall profile (compiled once per node: SyscallFilter.to_bpf).
FNCALL_SYSCALLS = FNCALL_DEFAULT


@dataclass(frozen=True)
class Limits:
    memory_bytes: int  # memory cgroup limit (memory+swap where the host accounts swap)
    pids: int
    cpu: float | None  # cores (CFS quota); None: accounted only (fncall stops runs on cpu time)
    # The sandbox's weight when cpu is contended (cgroup v1 cpu.shares; crun maps it to v2's
    # cpu.weight): its cpu request, as Kubernetes weighs pods (cpu_shares below).
    cpu_shares: int = 1024


@dataclass(frozen=True)
class SandboxPolicy:
    identity: Identity
    syscalls: SyscallFilter
    disk: DiskQuota
    egress: Egress
    limits: Limits


# cpu.shares of a cpu request, as Kubernetes computes it (MilliCPUToShares): 1024 per core,
# at least the kernel's minimum of 2. The quota (a limit) bounds what one sandbox may take;
# the shares decide who gets the cores when sandboxes that asked for little all spin at once:
# a neighbour that asked for 0.5 core outweighs 250 default sandboxes (0.001 core: 2 shares),
# where with equal shares it got 1/N of the host (measured: bench/burst.py --phases storm).
MIN_CPU_SHARES, MAX_CPU_SHARES = 2, 262144


def cpu_shares(cores: float) -> int:
    return max(MIN_CPU_SHARES, min(MAX_CPU_SHARES, round(cores * 1024)))


# Who the kernel's OOM killer takes when sandboxes that asked for little all wake at once
# (docs/architecture.md, "Capacity"): every process a sandbox runs (a container's init and
# execs, an fncall run) is first, the largest of them before the others (oom_badness is its
# size plus this, equal for all); the node-agent and what it starts for itself (QEMU, crun,
# mkfs) are last. Inside the node's cgroup its memory cap makes that OOM local to the node;
# past it, the host's services are still behind every sandbox. A sandbox cannot lower its own
# value (that needs CAP_SYS_RESOURCE, which it never has).
SANDBOX_OOM_SCORE_ADJ = 1000
AGENT_OOM_SCORE_ADJ = -900

def policy_for(spec: SandboxSpec, settings: NodeAgentSettings, ids: IdRange | None = None) -> SandboxPolicy:
    """A container's or a VM's policy (``spec.backend`` is resolved: container/microvm/vm);
    ``ids``: a container's user namespace range (corral_host/userns.py; None: none)."""
    vm = spec.backend in VM_BACKENDS
    memory_mb = reserved_memory_mb(spec.backend, spec.memory_mb, settings.vm.memory_overhead_mb)
    return SandboxPolicy(
        identity=VM_IDENTITY if vm else container_identity(settings, ids, spec.run_as),
        # VMs: none of ours, the guest kernel is its own and QEMU has its -sandbox (qemu.py).
        syscalls=NO_FILTER if vm else CONTAINER_DEFAULT,
        disk=disk_quota(spec),
        egress=egress_for(spec),
        limits=Limits(memory_bytes=memory_mb * MIB, pids=pids_max(spec.backend, spec.pids_limit), cpu=spec.cpu,
                      cpu_shares=cpu_shares(spec.reservation.cpu)),
    )


def fncall_run_policy(memory_mb: int, pids: int) -> SandboxPolicy:
    """One fncall run (a compile, a test case, or a worker's zygote): memory and tasks capped,
    its tmpfs dirs as large as its memory (they are charged to the same cgroup)."""
    memory = memory_mb * MIB
    return SandboxPolicy(identity=FNCALL_IDENTITY, syscalls=FNCALL_SYSCALLS, disk=DiskQuota(size_bytes=memory),
                         egress=NO_EGRESS, limits=Limits(memory_bytes=memory, pids=pids, cpu=None))
