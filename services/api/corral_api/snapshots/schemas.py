"""Public shapes of snapshots (``/v1/snapshots`` and ``POST /v1/sandboxes/{id}/snapshot``)."""

from datetime import datetime

from pydantic import BaseModel


class Snapshot(BaseModel):
    """A running VM's memory and disk state, saved on its node's disk."""

    id: str
    sandbox_id: str
    node_id: str
    backend: str
    environment: str
    disk_image: str | None = None
    memory_mb: int
    cpu: float
    size_bytes: int = 0
    created_at: datetime


class SnapshotList(BaseModel):
    items: list[Snapshot]
