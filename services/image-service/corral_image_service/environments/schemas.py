from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from corral_image_service.layers.schemas import NAME_PATTERN, REF_PATTERN, LayerKind


class EnvironmentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    base: str = Field(pattern=REF_PATTERN, description="name:version of a base layer")
    workspace: str | None = Field(default=None, pattern=REF_PATTERN)
    toolkit: str | None = Field(default=None, pattern=REF_PATTERN)


class EnvironmentLayer(BaseModel):
    kind: LayerKind
    name: str
    version: str
    digest: str
    size: int


class EnvironmentOut(BaseModel):
    name: str
    base: str
    workspace: str | None
    toolkit: str | None
    # Mount order for an overlay: base first, then workspace, then toolkit on top.
    layers: list[EnvironmentLayer]
    created_at: datetime
