from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

ImportState = Literal["queued", "running", "succeeded", "failed"]


class ImportProgress(BaseModel):
    step: str = "queued"  # queued | pulling | unpacking | building | registering | done
    layers_total: int = 0
    layers_done: int = 0
    bytes_unpacked: int = 0


class ImportError_(BaseModel):
    status: int
    code: str
    message: str
    loc: list[str | int] | None = None


class ImportResult(BaseModel):
    environment: str
    layers: list[str] = Field(description="name:version of the layers made, base first")
    digests: list[str]
    format: str
    source_layers: int
    config: dict[str, Any]
    # Seconds per step: pull (registry), unpack (decompress + apply layers), build (EROFS +
    # chunks), register.
    timings: dict[str, float] = Field(default_factory=dict)


class ImportOut(BaseModel):
    id: str
    owner: str = ""
    name: str
    version: str
    state: ImportState
    progress: ImportProgress
    error: ImportError_ | None = None
    result: ImportResult | None = None
    created_at: datetime
    updated_at: datetime
