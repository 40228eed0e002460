from enum import StrEnum


class SandboxCreateBackend(StrEnum):
    AUTO = "auto"
    CONTAINER = "container"

    def __str__(self) -> str:
        return str(self.value)
