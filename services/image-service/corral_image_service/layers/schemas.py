from datetime import datetime
from enum import Enum

from pydantic import BaseModel

# The catalogue's names, one rule for every service (the api refuses other names as given).
from corral_common.inputs import NAME_PATTERN, REF_PATTERN, VERSION_PATTERN  # noqa: F401 - re-exported


class LayerKind(str, Enum):
    base = "base"
    workspace = "workspace"
    toolkit = "toolkit"
    # A committed sandbox's writable layer: stacked above an environment's toolkit, overlay
    # whiteouts (0:0 character devices) and opaque directories kept as they were.
    diff = "diff"


OWNER_PATTERN = r"^[^/\x00-\x1f]{0,128}$"


class LayerOut(BaseModel):
    # The tenant the layer belongs to; "" is the operator's shared catalogue.
    owner: str = ""
    kind: LayerKind
    name: str
    version: str
    ref: str
    digest: str
    size: int
    created_at: datetime


class StorageUsage(BaseModel):
    owner: str
    # Bytes of the distinct blobs the owner's layers name (each tenant is charged for what
    # it registered, even where another tenant's identical upload is stored once).
    bytes: int
    layers: int
