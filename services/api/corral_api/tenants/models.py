"""Tenants, with their quotas (null: unlimited), kept for good in SQL."""

from datetime import UTC, datetime

from sqlalchemy import JSON, Column
from sqlmodel import Field, SQLModel


class TenantRow(SQLModel, table=True):
    __tablename__ = "tenants"

    name: str = Field(primary_key=True, max_length=128)
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    disabled: bool = False
    # {"max_sandboxes": 10, ...}: a key absent or null is unlimited.
    quotas: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
