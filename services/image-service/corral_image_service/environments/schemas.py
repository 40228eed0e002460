from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from corral_common.contracts.images import ImageConfig
from corral_image_service.layers.schemas import NAME_PATTERN, REF_PATTERN, LayerKind

MAX_DIFFS = 32


class EnvironmentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    base: str = Field(pattern=REF_PATTERN, description="name:version of a base layer")
    workspace: str | None = Field(default=None, pattern=REF_PATTERN)
    toolkit: str | None = Field(default=None, pattern=REF_PATTERN)
    diffs: list[Annotated[str, Field(pattern=REF_PATTERN)]] = Field(default_factory=list, max_length=MAX_DIFFS,
                                                     description="name:version of diff layers above the toolkit, lowest first")
    config: ImageConfig | None = None


class EnvironmentLayer(BaseModel):
    kind: LayerKind
    name: str
    version: str
    digest: str
    size: int


class EnvironmentOut(BaseModel):
    owner: str = ""
    name: str
    base: str
    workspace: str | None
    toolkit: str | None
    diffs: list[str] = Field(default_factory=list)
    # Mount order for an overlay: base first, then workspace, toolkit and the diffs on top.
    layers: list[EnvironmentLayer]
    config: ImageConfig | None = None
    created_at: datetime
