from pydantic import BaseModel, Field


class Node(BaseModel):
    """A live node's capacity and what its sandboxes (every tenant's) hold of it. Its internal
    address is not shown: only the api talks to node-agents."""

    node_id: str
    backends: list[str]
    accelerator: str = ""
    heartbeat_age_s: float = Field(description="seconds since its last full heartbeat (capacity); over the heartbeat "
                                   "timeout when its agent is busy and only its liveness pulse keeps it live")
    cpu: float
    used_cpu: float
    memory_mb: int
    used_memory_mb: int
    max_sandboxes: int
    used_sandboxes: int
    disk_mb: int | None = Field(None, description="room for sandbox disks; null: the node does not count disk")
    used_disk_mb: int = 0
    pids: int | None = None
    used_pids: int = 0


class NodeList(BaseModel):
    items: list[Node]
