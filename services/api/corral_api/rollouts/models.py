"""The trajectory log: one row per rollout, one per step (unique per (rollout, index))."""

from datetime import datetime

from sqlalchemy import JSON, Column, Index
from sqlmodel import Field, SQLModel


class RolloutRow(SQLModel, table=True):
    __tablename__ = "rollouts"
    __table_args__ = (Index("ix_rollouts_tenant_job", "tenant", "job_id"),
                      Index("ix_rollouts_status_pause_at", "status", "pause_at"))

    id: str = Field(primary_key=True, max_length=64)
    tenant: str = Field(max_length=128)
    job_id: str = Field(max_length=200)
    sandbox_id: str = Field(max_length=64)
    # True when the rollout created its sandbox (then it deletes it by default when done).
    owns_sandbox: bool = True
    meta: dict = Field(default_factory=dict, sa_column=Column("metadata", JSON, nullable=False))
    # active | paused (sandbox frozen while idle) | finished | expired (TTL cleanup)
    status: str = Field(default="active", max_length=16)
    step_count: int = 0
    idle_pause_s: float = 0.0  # 0: never pause
    ttl_s: float = 0.0
    # Epoch seconds, so the sweeper's queries are plain comparisons on SQLite and PostgreSQL.
    pause_at: float | None = None
    expires_at: float | None = None
    reward: float | None = None
    info: dict | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None


class RolloutStepRow(SQLModel, table=True):
    __tablename__ = "rollout_steps"
    __table_args__ = (Index("ux_rollout_steps_request_key", "rollout_id", "request_key", unique=True),)

    rollout_id: str = Field(primary_key=True, max_length=64, foreign_key="rollouts.id")
    step_index: int = Field(primary_key=True)
    action: str = Field(max_length=32)
    args: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    request_hash: str = Field(max_length=64)
    # The caller's idempotency key when it names steps by key, not index (SWE-ReX's X-Request-ID).
    request_key: str | None = Field(default=None, max_length=128)
    # pending (executing) | done | failed (the action raised; committed like an observation)
    # | interrupted (the api died while it ran: whether it took effect is unknown)
    status: str = Field(default="pending", max_length=16)
    observation: dict | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    error: dict | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    # Who executes it and until when that claim holds (renewed while it runs).
    executor: str = Field(max_length=64)
    lease_until: float
    started_at: datetime
    finished_at: datetime | None = None
    duration_ms: float | None = None
    # Times it was answered from the log (a request re-sent after a crash or a lost answer).
    replays: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
