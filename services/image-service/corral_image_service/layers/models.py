from datetime import datetime

from sqlalchemy import BigInteger, Column, DateTime, UniqueConstraint
from sqlmodel import Field

from corral_image_service.db.engine import ImageModel, utcnow

# The operator's shared catalogue (built by the CLI, readable by every tenant).
SHARED_OWNER = ""


class Layer(ImageModel, table=True):
    __tablename__ = "layers"
    __table_args__ = (UniqueConstraint("owner", "name", "version", name="uq_layers_owner_name_version"),)

    id: int | None = Field(default=None, primary_key=True)
    # The tenant a layer belongs to ("" = shared): names are per owner, blobs are shared by digest.
    owner: str = Field(default=SHARED_OWNER, max_length=128, index=True)
    kind: str = Field(max_length=16, index=True)
    name: str = Field(max_length=64)
    version: str = Field(max_length=64)
    digest: str = Field(max_length=71, index=True)
    # Root filesystems pass 2 GiB easily.
    size: int = Field(sa_column=Column(BigInteger, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
