from enum import StrEnum


class CommandRunStatus(StrEnum):
    ERROR = "Error"
    FINISHED = "Finished"
    TIMELIMITEXCEEDED = "TimeLimitExceeded"

    def __str__(self) -> str:
        return str(self.value)
