"""A tenant's quotas as the admin routes set and show them."""

from pydantic import BaseModel, ConfigDict, Field


class Quotas(BaseModel):
    """Per-tenant limits, checked at create; absent or null: unlimited."""

    model_config = ConfigDict(extra="forbid")

    max_sandboxes: int | None = Field(None, ge=0, le=10_000_000, description="Live sandboxes at once")
    max_cpu: float | None = Field(None, ge=0, le=10_000_000, description="CPU cores of live sandboxes together")
    max_memory_mb: int | None = Field(None, ge=0, description="MiB of memory of live sandboxes together")
    max_disk_mb: int | None = Field(None, ge=0, description="MiB of writable disk of live sandboxes together")
    max_image_bytes: int | None = Field(None, ge=0, description="Bytes of stored layer images")
    max_fncall_per_s: float | None = Field(None, gt=0, le=1_000_000, description="fncall calls per second")
