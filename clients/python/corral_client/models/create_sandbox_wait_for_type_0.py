from enum import StrEnum


class CreateSandboxWaitForType0(StrEnum):
    RUNNING = "running"
    SCHEDULED = "scheduled"
    STARTING = "starting"
    TERMINATED = "terminated"

    def __str__(self) -> str:
        return str(self.value)
