from enum import StrEnum


class Verdict(StrEnum):
    ACCEPTED = "accepted"
    COMPILE_ERROR = "compile_error"
    MEMORY_LIMIT_EXCEEDED = "memory_limit_exceeded"
    OUTPUT_LIMIT_EXCEEDED = "output_limit_exceeded"
    RUNTIME_ERROR = "runtime_error"
    SYSTEM_ERROR = "system_error"
    TIME_LIMIT_EXCEEDED = "time_limit_exceeded"
    WRONG_ANSWER = "wrong_answer"

    def __str__(self) -> str:
        return str(self.value)
