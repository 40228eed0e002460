from pydantic import BaseModel, ConfigDict, Field, field_validator

from corral_api.images.schemas import Environment, Layer
from corral_common.inputs import VERSION_PATTERN, valid_name


class CommitRequest(BaseModel):
    """Which layer (and environment) a sandbox's writable layer becomes."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, max_length=64, description="Layer name (default: commit-<sandbox>)")
    version: str | None = Field(None, pattern=VERSION_PATTERN, description="Layer version (default: a timestamp)")
    environment: str | None = Field(None, max_length=64, description="Also make this environment: the "
                                    "sandbox's environment with the new layer on top, and its config")

    _names = field_validator("name", "environment")(valid_name)


class CommitResult(BaseModel):
    layer: Layer
    environment: Environment | None = None
