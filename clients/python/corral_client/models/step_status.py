from enum import StrEnum


class StepStatus(StrEnum):
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    PENDING = "pending"

    def __str__(self) -> str:
        return str(self.value)
