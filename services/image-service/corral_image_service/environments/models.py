from datetime import datetime

from sqlalchemy import Column, DateTime
from sqlmodel import Field

from corral_image_service.db.engine import ImageModel, utcnow


class Environment(ImageModel, table=True):
    __tablename__ = "environments"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=64, unique=True)
    base_layer_id: int = Field(foreign_key="layers.id")
    workspace_layer_id: int | None = Field(default=None, foreign_key="layers.id")
    toolkit_layer_id: int | None = Field(default=None, foreign_key="layers.id")
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
