from enum import StrEnum


class SandboxState(StrEnum):
    FAILED = "failed"
    PAUSED = "paused"
    PENDING = "pending"
    RUNNING = "running"
    SCHEDULED = "scheduled"
    STARTING = "starting"
    STOPPING = "stopping"
    TERMINATED = "terminated"

    def __str__(self) -> str:
        return str(self.value)
