"""Public shapes of layers, environments, storage and imports (translated from image-service's)."""

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from corral_common.contracts.images import ImageConfig
from corral_common.inputs import REF_PATTERN, valid_name

LayerKind = Literal["base", "workspace", "toolkit", "diff"]


class Layer(BaseModel):
    kind: LayerKind
    name: str
    version: str
    ref: str = Field(description="name:version")
    digest: str = Field(description="sha256 of the EROFS image: identical content has one digest, stored once")
    size: int
    shared: bool = Field(description="From the operator's shared catalogue (read-only to tenants)")
    created_at: datetime

    @classmethod
    def of(cls, reply: dict[str, Any]) -> "Layer":
        return cls(**{k: reply[k] for k in ("kind", "name", "version", "ref", "digest", "size", "created_at")},
                   shared=reply.get("owner", "") == "")


class EnvironmentLayer(BaseModel):
    kind: LayerKind
    name: str
    version: str
    digest: str
    size: int


class EnvironmentCreate(BaseModel):
    """A named combination of layers (yours or the shared catalogue's; your own shadow a
    shared one of the same name:version), and what its sandboxes start with."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=64)
    base: str = Field(pattern=REF_PATTERN, description="name:version of a base layer")
    workspace: str | None = Field(None, pattern=REF_PATTERN)
    toolkit: str | None = Field(None, pattern=REF_PATTERN)
    diffs: list[str] = Field(default_factory=list, max_length=32,
                             description="name:version of diff layers (commits) above the toolkit, lowest first")
    config: ImageConfig | None = None

    _name = field_validator("name")(valid_name)

    @field_validator("diffs")
    @classmethod
    def _refs(cls, value: list[str]) -> list[str]:
        import re

        for ref in value:
            if not re.match(REF_PATTERN, ref):
                raise ValueError(f"{ref!r} is not name:version")
        return value


class Environment(BaseModel):
    name: str
    base: str
    workspace: str | None = None
    toolkit: str | None = None
    diffs: list[str] = Field(default_factory=list)
    layers: list[EnvironmentLayer] = Field(description="Mount order: base first, the top layer last")
    config: ImageConfig | None = None
    shared: bool
    created_at: datetime

    @classmethod
    def of(cls, reply: dict[str, Any]) -> "Environment":
        fields = {k: reply.get(k) for k in ("name", "base", "workspace", "toolkit", "layers", "config", "created_at")}
        return cls(**fields, diffs=reply.get("diffs") or [], shared=reply.get("owner", "") == "")


class StorageUsage(BaseModel):
    used_bytes: int = Field(description="Bytes of the distinct layer images you registered")
    quota_bytes: int | None = Field(description="Your storage quota (None: unlimited)")
    layers: int


class ImportProgress(BaseModel):
    step: str = Field(description="queued | pulling | unpacking | building | registering")
    layers_total: int = 0
    layers_done: int = 0
    bytes_unpacked: int = 0


class ImportFailure(BaseModel):
    status: int = Field(description="The HTTP status this failure is (4xx: the image's fault)")
    code: str
    message: str
    loc: list[str | int] | None = None


class ImportResult(BaseModel):
    environment: str
    layers: list[str] = Field(description="name:version of the layers made, base first")
    digests: list[str]
    format: str = Field(description="oci-layout | docker-archive")
    source_layers: int
    config: ImageConfig
    timings: dict[str, float] = Field(default_factory=dict, description="Seconds per step: pull, unpack, build, "
                                                                         "register")


class ImageImport(BaseModel):
    id: str
    name: str
    version: str
    state: Literal["queued", "running", "succeeded", "failed"]
    progress: ImportProgress
    error: ImportFailure | None = None
    result: ImportResult | None = None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, reply: dict[str, Any]) -> "ImageImport":
        return cls.model_validate({k: v for k, v in reply.items() if k != "owner"})
