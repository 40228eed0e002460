"""Requests no live node could ever hold because of one field, refused before anything is made.

Each node advertises the tasks its sandboxes may take together (its pids cap: a share of the
host's pid_max less a system reserve), its cpu and memory, and the disk it has for sandbox
upper layers; the scheduler counts every sandbox's request against them. A request above what any
live node advertises could never be placed: that is the caller's mistake, so it is a 422 naming
the field, not a sandbox that waits in the queue or fails later. The ceilings depend on the
nodes, so they are read from their heartbeats (cached for a moment), never from a setting that
could disagree with them; the one operator setting is ``max_disk_mb``, a deployment-wide
maximum. With no live node that runs the sandbox's kind there is nothing to judge by: the
request queues, and the scheduler fails it ``unschedulable`` if the nodes that come cannot hold
it.
"""

import time
from collections.abc import Callable, Sequence

from corral_common.contracts.sandboxes import SandboxSpec, pids_max, reserved_memory_mb
from corral_common.store.state import StateStore
from corral_common.store.state_nodes import NodeInfo, cpu_milli
from corral_common.web.errors import Unprocessable


def _largest(nodes: Sequence[NodeInfo], backend: str, capacity: Callable[[NodeInfo], int | None]) -> int | None:
    """The largest capacity among the live nodes that run ``backend``; None when there is no
    such node or one of them does not count this resource (an agent from before it was counted).
    compat(53beb59 pids, 653b94c disk; 2026-12-01): the None case goes when no node runs an agent
    older than 653b94c."""
    counted = [capacity(n) for n in nodes if backend in n.backends]
    if not counted or any(c is None for c in counted):
        return None
    return max(c for c in counted if c is not None)


class NodeCeilings:
    def __init__(self, store: StateStore, heartbeat_timeout_s: float, *, max_disk_mb: int = 0, ttl_s: float = 2.0):
        self.store = store
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.max_disk_mb = max_disk_mb
        self.ttl_s = ttl_s
        self._nodes: list[NodeInfo] = []
        self._read_at = -float("inf")

    async def _live(self) -> list[NodeInfo]:
        now = time.monotonic()
        if now - self._read_at > self.ttl_s:
            self._nodes = await self.store.live_nodes(self.heartbeat_timeout_s)
            self._read_at = now
        return self._nodes

    async def require(self, spec: SandboxSpec, loc: Sequence[str] = ("body",)) -> None:
        """Raise a 422 naming the field (cpu, memory_mb, pids_limit, disk_mb) that no live node
        that runs ``spec``'s kind could ever hold. These are the limits: a request is at most its
        limit (SandboxSpec), so one that passes here fits an empty node too."""
        if self.max_disk_mb and spec.disk_mb > self.max_disk_mb:
            raise Unprocessable(f"disk_mb={spec.disk_mb} is over this deployment's maximum of {self.max_disk_mb}",
                                loc=[*loc, "disk_mb"], code="disk_too_large")
        nodes, kind = await self._live(), spec.backend
        # A VM takes QEMU's overhead beyond its guest RAM and QEMU's threads instead of the
        # guest's pids: compare what the node would reserve, in the units the caller gave.
        overhead = max((reserved_memory_mb(kind, 0, n.vm_memory_overhead_mb) for n in nodes if kind in n.backends),
                       default=0)
        most_cpu = _largest(nodes, kind, lambda n: n.cpu_milli)
        if most_cpu is not None and cpu_milli(spec.cpu) > most_cpu:
            raise Unprocessable(f"cpu={spec.cpu} is more than any {kind} node has (at most {most_cpu / 1000:g})",
                                loc=[*loc, "cpu"], code="exceeds_node_capacity", extra={"max_cpu": most_cpu / 1000})
        most_memory = _largest(nodes, kind, lambda n: n.memory_mb - reserved_memory_mb(kind, 0, n.vm_memory_overhead_mb))
        if most_memory is not None and spec.memory_mb > most_memory:
            raise Unprocessable(f"memory_mb={spec.memory_mb} is more than any {kind} node has (at most {most_memory}"
                                + (f", after {overhead} MiB of VM overhead)" if overhead else ")"),
                                loc=[*loc, "memory_mb"], code="exceeds_node_capacity",
                                extra={"max_memory_mb": most_memory})
        most_pids = _largest(nodes, kind, lambda n: n.pids)
        need = pids_max(kind, spec.pids_limit)
        if most_pids is not None and need > most_pids:
            message = (f"pids_limit {need} is more than any node allows (at most {most_pids})"
                       if need == spec.pids_limit
                       else f"a {kind} sandbox takes {need} host tasks, more than any node allows ({most_pids})")
            raise Unprocessable(message, loc=[*loc, "pids_limit"], code="exceeds_node_capacity",
                                extra={"max_pids_limit": most_pids})
        # compat(653b94c, 2026-12-01): older agents advertise none; delete the filter when no node runs one.
        disk_nodes = [n for n in nodes if n.disk_mb is not None]
        largest_disk = _largest(disk_nodes, kind, lambda n: n.disk_mb)
        if largest_disk is not None and spec.disk_mb > largest_disk:
            raise Unprocessable(f"disk_mb={spec.disk_mb} is more than any node can hold (the largest {kind} "
                                f"node has {largest_disk} MiB for sandbox disks)", loc=[*loc, "disk_mb"],
                                code="disk_too_large")
