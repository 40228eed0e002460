from datetime import datetime

from sqlalchemy import JSON, BigInteger, Column
from sqlmodel import Field, SQLModel


class SandboxHistory(SQLModel, table=True):
    """A sandbox once it has ended: kept for good (Redis forgets it after an hour)."""

    __tablename__ = "sandbox_history"

    id: str = Field(primary_key=True, max_length=64)
    tenant: str = Field(index=True, max_length=128)
    environment: str = Field(max_length=200)
    backend: str = Field(max_length=32)
    node_id: str | None = Field(default=None, max_length=128)
    state: str = Field(max_length=32)
    reason: str | None = Field(default=None, max_length=128)
    # Why it failed, in words; null before migration 0008.
    error: str | None = Field(default=None, max_length=500)
    spec: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    # How its node ran it (kind, accelerator, image transport...); null before migration 0003.
    runtime: dict | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    labels: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    cpu_seconds: float = 0.0
    peak_memory_bytes: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    wall_time_s: float = 0.0
