from enum import StrEnum


class UploadLayerKind(StrEnum):
    BASE = "base"
    DIFF = "diff"
    TOOLKIT = "toolkit"
    WORKSPACE = "workspace"

    def __str__(self) -> str:
        return str(self.value)
