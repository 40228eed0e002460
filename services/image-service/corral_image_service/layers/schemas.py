from datetime import datetime
from enum import Enum

from pydantic import BaseModel

# The catalogue's names, one rule for every service (the api refuses other names as given).
from corral_common.inputs import NAME_PATTERN, REF_PATTERN, VERSION_PATTERN  # noqa: F401 - re-exported


class LayerKind(str, Enum):
    base = "base"
    workspace = "workspace"
    toolkit = "toolkit"


class LayerOut(BaseModel):
    kind: LayerKind
    name: str
    version: str
    ref: str
    digest: str
    size: int
    created_at: datetime
