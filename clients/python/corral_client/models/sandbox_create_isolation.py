from enum import StrEnum


class SandboxCreateIsolation(StrEnum):
    CONTAINER = "container"
    VM = "vm"

    def __str__(self) -> str:
        return str(self.value)
