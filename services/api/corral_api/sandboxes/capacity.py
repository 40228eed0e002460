"""Requests no live node could ever hold because of one field, refused before anything is made.

Each node advertises the tasks its sandboxes may take together (its pids cap: a share of the
host's pid_max less a system reserve), and the scheduler counts every sandbox's pids_limit
against it. A pids_limit above what any live node advertises could never be placed: that is
the caller's mistake, so it is a 422 naming the field, not a sandbox that fails later. The cap
depends on the nodes, so the ceiling is read from their heartbeats (cached for a moment),
never from a setting that could disagree with them. With no live node that runs the
sandbox's kind there is nothing to judge by: the request queues, and the scheduler fails it
``unschedulable`` if the nodes that come cannot hold it. (Memory and cpu beyond every node stay
``unschedulable``: they are bounded by the spec's own limits and sized per node.)
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


class NodeCeilings:
    def __init__(self, store: StateStore, heartbeat_timeout_s: float, ttl_s: float = 2.0):
        self.store = store
        self.heartbeat_timeout_s = heartbeat_timeout_s
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
        """Raise a 422 naming ``pids_limit`` if no live node could ever hold ``spec``'s."""
        most = most_pids(await self._live(), spec.backend)
        need = reserved_pids(spec.backend, spec.pids_limit)
        if most is None or need <= most:
            return
        message = (f"pids_limit {need} is more than any node allows (at most {most})" if need == spec.pids_limit
                   else f"a {spec.backend} sandbox takes {need} host tasks, more than any node allows ({most})")
        raise Unprocessable(message, loc=[*loc, "pids_limit"], code="exceeds_node_capacity",
                            extra={"max_pids_limit": most})
