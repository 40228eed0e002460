from datetime import datetime

from sqlalchemy import Column, DateTime, Text, UniqueConstraint
from sqlmodel import Field

from corral_image_service.db.engine import ImageModel, utcnow
from corral_image_service.layers.models import SHARED_OWNER


class Environment(ImageModel, table=True):
    __tablename__ = "environments"
    __table_args__ = (UniqueConstraint("owner", "name", name="uq_environments_owner_name"),)

    id: int | None = Field(default=None, primary_key=True)
    owner: str = Field(default=SHARED_OWNER, max_length=128, index=True)
    name: str = Field(max_length=64)
    base_layer_id: int = Field(foreign_key="layers.id")
    workspace_layer_id: int | None = Field(default=None, foreign_key="layers.id")
    toolkit_layer_id: int | None = Field(default=None, foreign_key="layers.id")
    # JSON list of layer ids stacked above the toolkit, lowest first: committed sandbox
    # upper dirs (overlay whiteouts kept), so a commit of a commit needs no flattening.
    diff_layer_ids: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    # JSON of the image config a sandbox starts with (env, cwd, user, entrypoint, cmd,
    # exposed ports, labels): from an OCI import, or given at create.
    config: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
