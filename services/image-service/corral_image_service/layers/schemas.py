from datetime import datetime
from enum import Enum

from pydantic import BaseModel

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
REF_PATTERN = NAME_PATTERN[:-1] + ":" + VERSION_PATTERN[1:]


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
