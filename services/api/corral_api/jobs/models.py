"""Jobs as asked for, kept for good: Redis holds a job's queue, this row what it takes to
queue it again when Redis lost it (restarted without its data)."""

from sqlalchemy import JSON, Column
from sqlmodel import Field, SQLModel


class JobRow(SQLModel, table=True):
    __tablename__ = "jobs"

    id: str = Field(primary_key=True, max_length=64)
    tenant: str = Field(index=True, max_length=128)
    count: int
    weight: float
    priority: int = 0
    # The sandboxes' spec as queued (labels with job=<id> included).
    spec: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    labels: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: float  # epoch seconds, as in the job's Redis record
    deleted: bool = Field(default=False, index=True)
