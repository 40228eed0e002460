from enum import StrEnum


class RunStatus(StrEnum):
    FAILED = "Failed"
    SANDBOXERROR = "SandboxError"
    SUCCESS = "Success"

    def __str__(self) -> str:
        return str(self.value)
