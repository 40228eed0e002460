from datetime import datetime

from sqlalchemy import BigInteger, Column, DateTime, UniqueConstraint
from sqlmodel import Field

from corral_image_service.db.engine import ImageModel, utcnow


class DiskImage(ImageModel, table=True):
    __tablename__ = "disk_images"
    __table_args__ = (UniqueConstraint("name", "version", name="uq_disk_images_name_version"),)

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=64, index=True)
    version: str = Field(max_length=64)
    digest: str = Field(max_length=71, index=True)
    format: str = Field(max_length=16)
    size_bytes: int = Field(sa_column=Column(BigInteger, nullable=False))
    virtual_size_bytes: int = Field(sa_column=Column(BigInteger, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
