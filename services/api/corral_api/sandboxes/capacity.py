"""Requests no live node could ever hold because of one field, refused before anything is made.

Each node advertises the tasks its sandboxes may take together (its pids cap: a share of the
host's pid_max less a system reserve) and the disk it has for sandbox upper layers; the
scheduler counts every sandbox's pids_limit and disk_mb against them. A request above what any
live node advertises could never be placed: that is the caller's mistake, so it is a 422 naming
the field, not a sandbox that waits in the queue or fails later. The ceilings depend on the
nodes, so they are read from their heartbeats (cached for a moment), never from a setting that
could disagree with them; the one operator setting is ``max_disk_mb``, a deployment-wide
maximum. With no live node that runs the sandbox's kind there is nothing to judge by: the
request queues, and the scheduler fails it ``unschedulable`` if the nodes that come cannot hold
it. (Memory and cpu beyond every node stay ``unschedulable``: they are bounded by the spec's own
limits and sized per node.)
"""

import time
from collections.abc import Sequence

from corral_common.errors import Unprocessable
from corral_common.sandboxes import SandboxSpec, reserved_pids
from corral_common.state import NodeInfo, StateStore


def most_pids(nodes: Sequence[NodeInfo], backend: str) -> int | None:
    """The largest pids capacity among the nodes that run ``backend``; None when there is no
    such node, or one of them counts no pids (it predates the node pids cap)."""
    counted = [n.pids for n in nodes if backend in n.backends]
    if not counted or any(p is None for p in counted):
        return None
    return max(counted)


def most_disk_mb(nodes: Sequence[NodeInfo], backend: str) -> int | None:
    """The largest sandbox disk among the nodes that run ``backend`` and advertise one."""
    counted = [n.disk_mb for n in nodes if backend in n.backends and n.disk_mb is not None]
    return max(counted) if counted else None


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
        """Raise a 422 naming ``pids_limit`` or ``disk_mb`` if no live node could ever hold ``spec``."""
        if self.max_disk_mb and spec.disk_mb > self.max_disk_mb:
            raise Unprocessable(f"disk_mb={spec.disk_mb} is over this deployment's maximum of {self.max_disk_mb}",
                                loc=[*loc, "disk_mb"], code="disk_too_large")
        nodes = await self._live()
        most = most_pids(nodes, spec.backend)
        need = reserved_pids(spec.backend, spec.pids_limit)
        if most is not None and need > most:
            message = (f"pids_limit {need} is more than any node allows (at most {most})" if need == spec.pids_limit
                       else f"a {spec.backend} sandbox takes {need} host tasks, more than any node allows ({most})")
            raise Unprocessable(message, loc=[*loc, "pids_limit"], code="exceeds_node_capacity",
                                extra={"max_pids_limit": most})
        largest = most_disk_mb(nodes, spec.backend)
        if largest is not None and spec.disk_mb > largest:
            raise Unprocessable(f"disk_mb={spec.disk_mb} is more than any node can hold (the largest {spec.backend} "
                                f"node has {largest} MiB for sandbox disks)", loc=[*loc, "disk_mb"],
                                code="disk_too_large")
