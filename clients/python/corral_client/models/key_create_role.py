from enum import StrEnum


class KeyCreateRole(StrEnum):
    OPERATOR = "operator"
    TENANT = "tenant"

    def __str__(self) -> str:
        return str(self.value)
