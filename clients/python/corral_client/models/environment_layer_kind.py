from enum import StrEnum


class EnvironmentLayerKind(StrEnum):
    BASE = "base"
    DIFF = "diff"
    TOOLKIT = "toolkit"
    WORKSPACE = "workspace"

    def __str__(self) -> str:
        return str(self.value)
