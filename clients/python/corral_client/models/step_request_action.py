from enum import StrEnum


class StepRequestAction(StrEnum):
    EXEC = "exec"
    LIST_FILES = "list_files"
    READ_FILE = "read_file"
    WRITE_FILE = "write_file"

    def __str__(self) -> str:
        return str(self.value)
