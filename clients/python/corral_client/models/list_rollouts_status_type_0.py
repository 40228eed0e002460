from enum import StrEnum


class ListRolloutsStatusType0(StrEnum):
    ACTIVE = "active"
    EXPIRED = "expired"
    FINISHED = "finished"
    PAUSED = "paused"

    def __str__(self) -> str:
        return str(self.value)
