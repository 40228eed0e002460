from datetime import datetime
from enum import Enum

from pydantic import BaseModel, Field


class DiskFormat(str, Enum):
    qcow2 = "qcow2"
    raw = "raw"


class DiskImageOut(BaseModel):
    name: str
    version: str
    digest: str = Field(description="sha256 of the file; GET /v1/blobs/{digest} serves it (Range supported)")
    format: DiskFormat
    size_bytes: int = Field(description="Size of the stored file")
    virtual_size_bytes: int = Field(description="Size of the disk the guest sees")
    created_at: datetime
