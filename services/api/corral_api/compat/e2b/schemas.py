"""E2B's control-plane bodies (field names as the SDK's generated models spell them)."""

from pydantic import BaseModel, ConfigDict, Field


class NewSandbox(BaseModel):
    """``NewSandbox`` (POST /sandboxes) and ``NewSandboxV2`` (POST /v2/sandboxes). Keys Corral
    does not act on (autoPause, network, mcp, volumeMounts, secure...) are ignored, as E2B
    tells servers to; ``cpuCount``/``memoryMB``/``diskSizeMB`` are Corral's own additions for
    raw HTTP callers (the SDK takes resources from the template)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    template_id: str = Field("base", alias="templateID", min_length=1, max_length=200)
    timeout: int | None = Field(None, ge=1, description="Seconds until the sandbox is killed (default 300)")
    metadata: dict[str, str] = Field(default_factory=dict, max_length=64)
    env_vars: dict[str, str] = Field(default_factory=dict, alias="envVars")
    cpu_count: float | None = Field(None, alias="cpuCount", gt=0, le=64)
    memory_mb: int | None = Field(None, alias="memoryMB", ge=16, le=262144)
    disk_size_mb: int | None = Field(None, alias="diskSizeMB", ge=16, le=1048576)


class TimeoutBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    timeout: int = Field(..., ge=0, description="Seconds from now")


class ConnectBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    timeout: int | None = Field(None, ge=0)
