"""Snapshots: durable records of VM states saved on a node's disk."""

from datetime import datetime

from sqlalchemy import JSON, BigInteger, Column, Index
from sqlmodel import Field, SQLModel


class SnapshotRow(SQLModel, table=True):
    """One saved sandbox state. The bytes live on ``node_id``'s disk; this row says whose it
    is and what a sandbox restored from it must look like (its spec)."""

    __tablename__ = "snapshots"
    __table_args__ = (Index("ix_snapshots_tenant_created", "tenant", "created_at"),)

    id: str = Field(primary_key=True, max_length=64)
    tenant: str = Field(max_length=128)
    sandbox_id: str = Field(max_length=64)
    node_id: str = Field(max_length=128)
    backend: str = Field(max_length=32)
    environment: str = Field(default="", max_length=200)
    disk_image: str | None = Field(default=None, max_length=200)
    memory_mb: int
    cpu: float
    size_bytes: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    # The source sandbox's whole spec: a restore takes its machine shape from here.
    spec: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime
