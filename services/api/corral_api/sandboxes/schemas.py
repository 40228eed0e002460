from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

from corral_common.sandboxes import SandboxSpec, SandboxState, Usage
from corral_common.state import SandboxRecord


class SandboxCreate(SandboxSpec):
    """Request body of ``POST /v1/sandboxes``."""


WaitState = Literal["scheduled", "starting", "running", "terminated"]


class Sandbox(BaseModel):
    id: str
    state: SandboxState
    reason: str | None = None
    environment: str
    backend: str
    node_id: str | None = None
    cpu: float
    memory_mb: int
    disk_mb: int
    timeout_s: int
    labels: dict[str, str] = Field(default_factory=dict)
    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    usage: Usage | None = None

    @classmethod
    def from_record(cls, record: SandboxRecord) -> "Sandbox":
        def ts(value: float | None) -> datetime | None:
            return datetime.fromtimestamp(value, UTC) if value is not None else None

        spec = record.spec
        return cls(
            id=record.id, state=record.state, reason=record.reason, environment=spec.environment,
            backend="container" if spec.backend == "auto" else spec.backend, node_id=record.node_id,
            cpu=spec.cpu, memory_mb=spec.memory_mb, disk_mb=spec.disk_mb, timeout_s=spec.timeout_s,
            labels=spec.labels, created_at=ts(record.created_at), started_at=ts(record.started_at),
            ended_at=ts(record.ended_at), usage=record.usage,
        )


class SandboxList(BaseModel):
    items: list[Sandbox]
