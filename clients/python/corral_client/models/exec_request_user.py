from enum import StrEnum


class ExecRequestUser(StrEnum):
    ROOT = "root"
    USER = "user"

    def __str__(self) -> str:
        return str(self.value)
