from enum import StrEnum


class SandboxCreateBackend(StrEnum):
    AUTO = "auto"
    CONTAINER = "container"
    MICROVM = "microvm"
    VM = "vm"

    def __str__(self) -> str:
        return str(self.value)
