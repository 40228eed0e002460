"""Capacity arithmetic (pure): what a host has, what a node may take of it, what it advertises.

Three amounts, in the host's own units: cpu (cores), memory (MiB) and pids (tasks:
processes and threads, what the pids cgroup counts). A host's budget is what it has less the
system reserve (kept back for the OS and the platform's own services: Redis, RabbitMQ, the
agents themselves). A node claims part of that budget (explicit settings, else its
``host_share``), never more than the other agents on the host left free (registry.py). What
it claims caps its cgroup (the pids cap always, memory as a backstop); what it advertises to
the scheduler is the claim times the overcommit ratios (cpu 8x by default: sandboxes idle
between commands; memory 1x), with pids never overcommitted and less what its fncall
workers may use.
"""

import math
import os
from dataclasses import dataclass, fields

from corral_common.contracts.sandboxes import MIN_PIDS_REQUEST

MIB = 1024 * 1024
# The system reserve where none is configured: a tenth of the host, at least this much.
MIN_RESERVED_MEMORY_MB = 1024


@dataclass(frozen=True)
class Resources:
    cpu: float = 0.0  # cores
    memory_mb: int = 0
    pids: int = 0

    def __add__(self, other: "Resources") -> "Resources":
        return Resources(self.cpu + other.cpu, self.memory_mb + other.memory_mb, self.pids + other.pids)

    def __sub__(self, other: "Resources") -> "Resources":
        return Resources(self.cpu - other.cpu, self.memory_mb - other.memory_mb, self.pids - other.pids)

    def floor0(self) -> "Resources":
        return Resources(max(0.0, self.cpu), max(0, self.memory_mb), max(0, self.pids))

    def fits_in(self, other: "Resources") -> bool:
        return self.cpu <= other.cpu + 1e-9 and self.memory_mb <= other.memory_mb and self.pids <= other.pids

    def clamp(self, bound: "Resources") -> tuple["Resources", list[str]]:
        """Each amount at most ``bound``'s; also the names of the amounts that were cut."""
        cut = [f.name for f in fields(self) if getattr(self, f.name) > getattr(bound, f.name) + 1e-9]
        return Resources(min(self.cpu, bound.cpu), min(self.memory_mb, bound.memory_mb),
                         min(self.pids, bound.pids)), cut

    def as_dict(self) -> dict[str, float | int]:
        return {"cpu": self.cpu, "memory_mb": self.memory_mb, "pids": self.pids}

    @classmethod
    def from_dict(cls, data: dict) -> "Resources":
        return cls(float(data.get("cpu", 0)), int(data.get("memory_mb", 0)), int(data.get("pids", 0)))


def total(claims: list[Resources]) -> Resources:
    return sum(claims, Resources())


@dataclass(frozen=True)
class Host:
    """What the machine has: usable cores, RAM and the task limit (min of kernel.pid_max and
    kernel.threads-max: every process and thread takes a pid)."""

    cpus: float
    memory_mb: int
    tasks: int


def _read_int(path: str, default: int) -> int:
    try:
        with open(path) as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def read_host() -> Host:
    memory_mb = 0
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    memory_mb = int(line.split()[1]) // 1024
                    break
    except OSError:
        pass
    tasks = min(_read_int("/proc/sys/kernel/pid_max", 32768), _read_int("/proc/sys/kernel/threads-max", 1 << 22))
    return Host(cpus=float(len(os.sched_getaffinity(0))), memory_mb=memory_mb, tasks=tasks)


def default_reserved_memory_mb(host: Host) -> int:
    return max(MIN_RESERVED_MEMORY_MB, host.memory_mb // 10)


def host_budget(host: Host, reserved_memory_mb: int | None, reserved_pids: int) -> Resources:
    """What the host's nodes may claim together: the host less the system reserve."""
    if reserved_memory_mb is None:
        reserved_memory_mb = default_reserved_memory_mb(host)
    return Resources(host.cpus, host.memory_mb - reserved_memory_mb, host.tasks - reserved_pids).floor0()


def wanted(budget: Resources, share: float, *, cpu: float | None = None, memory_mb: int | None = None,
           pids: int | None = None) -> Resources:
    """What a node asks for: each amount that is set explicitly, else ``share`` of the budget."""
    return Resources(cpu if cpu is not None else budget.cpu * share,
                     memory_mb if memory_mb is not None else int(budget.memory_mb * share),
                     pids if pids is not None else int(budget.pids * share))


def grant(want: Resources, budget: Resources, others: list[Resources]) -> tuple[Resources, list[str]]:
    """What a node gets: what it wants, at most what the other nodes' claims left of the budget."""
    return want.clamp((budget - total(others)).floor0())


@dataclass(frozen=True)
class NodeCapacity:
    """A node's claim on its host (its cgroup caps) and what it advertises (the scheduler places
    at most this much on it)."""

    claim: Resources
    cpu: float
    memory_mb: int
    pids: int  # what its sandboxes may reserve together: the pids cap less its fncall workers'
    # How many sandboxes it runs at once (the setting, or what its pids hold at the smallest pids request).
    max_sandboxes: int = 0

    @property
    def cgroup_memory_bytes(self) -> int:
        return self.claim.memory_mb * MIB

    @property
    def cgroup_pids(self) -> int:
        return self.claim.pids


def node_capacity(claim: Resources, *, cpu_overcommit: float, memory_overcommit: float,
                  fncall_pids: int = 0, max_sandboxes: int = 0, id_ranges: int | None = None,
                  open_files_room: int | None = None) -> NodeCapacity:
    """``max_sandboxes`` 0: derived from the pids (``MIN_PIDS_REQUEST`` each), at most
    ``id_ranges`` (the user namespace ranges the node can hand out; None: no such bound).
    Set or derived, at most ``open_files_room`` (the sandboxes the agent's descriptor limit
    holds: past it every start fails EMFILE, where "node is full" says what is wrong)."""
    pids = max(0, claim.pids - fncall_pids)
    if not max_sandboxes:
        max_sandboxes = pids // MIN_PIDS_REQUEST
        if id_ranges is not None:
            max_sandboxes = min(max_sandboxes, id_ranges)
    if open_files_room is not None:
        max_sandboxes = min(max_sandboxes, open_files_room)
    return NodeCapacity(claim=claim, cpu=claim.cpu * cpu_overcommit,
                        memory_mb=math.floor(claim.memory_mb * memory_overcommit), pids=pids,
                        max_sandboxes=max_sandboxes)
