from datetime import datetime

from sqlalchemy import Column, DateTime, Text
from sqlmodel import Field

from corral_image_service.db.engine import ImageModel, utcnow


class ImportJob(ImageModel, table=True):
    """One image import (OCI layout, docker save archive or registry reference) and how far it got."""

    __tablename__ = "imports"

    id: str = Field(primary_key=True, max_length=64)
    owner: str = Field(max_length=128, index=True)
    name: str = Field(max_length=64)
    version: str = Field(max_length=64)
    state: str = Field(max_length=16)  # queued | running | succeeded | failed
    progress: str = Field(sa_column=Column(Text, nullable=False))  # JSON
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))  # JSON {status, code, message, loc}
    result: str | None = Field(default=None, sa_column=Column(Text, nullable=True))  # JSON
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
