"""Live nodes as the scheduler counts them (their heartbeats and reservations in Redis)."""

import time

from corral_api.nodes.schemas import Node
from corral_common.store.state import StateStore
from corral_common.store.state_nodes import NodeInfo


def node_view(info: NodeInfo, now: float) -> Node:
    return Node(node_id=info.node_id, backends=list(info.backends), accelerator=info.accelerator,
                heartbeat_age_s=round(max(0.0, now - info.heartbeat_at), 3),
                cpu=info.cpu_milli / 1000, used_cpu=info.used_cpu_milli / 1000,
                memory_mb=info.memory_mb, used_memory_mb=info.used_memory_mb,
                max_sandboxes=info.max_sandboxes, used_sandboxes=info.used_sandboxes,
                disk_mb=info.disk_mb, used_disk_mb=info.used_disk_mb, pids=info.pids, used_pids=info.used_pids)


class NodeService:
    def __init__(self, store: StateStore, heartbeat_timeout_s: float):
        self.store = store
        self.heartbeat_timeout_s = heartbeat_timeout_s

    async def live(self) -> list[Node]:
        nodes = await self.store.live_nodes(self.heartbeat_timeout_s)
        now = time.time()
        return sorted((node_view(n, now) for n in nodes), key=lambda node: node.node_id)
