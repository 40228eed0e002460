"""SWE-ReX's request and response models (swerex.runtime.abstract, swe-rex 1.4.0), field for
field, plus the token Corral issues for one sandbox. Extra keys are ignored, as upstream does."""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from corral_api.compat.swerex.sessions import SESSION_NAME

SessionName = Annotated[str, Field(max_length=64, description="A session name: letters, digits, '.', '_', '-'")]


def _session_name(value: str) -> str:
    if not SESSION_NAME.match(value):
        raise ValueError("a session name is 1-64 letters, digits, '.', '_' or '-' (it names a directory)")
    return value


class _Session(BaseModel):
    session: SessionName = "default"
    _valid = field_validator("session")(_session_name)


class IsAliveResponse(BaseModel):
    is_alive: bool
    message: str = ""


class CreateBashSessionRequest(_Session):
    startup_source: list[Annotated[str, Field(max_length=4096)]] = Field([], max_length=64)
    session_type: Literal["bash"] = "bash"
    startup_timeout: float = Field(1.0, gt=0, le=3600)


class CreateBashSessionResponse(BaseModel):
    output: str = ""
    session_type: Literal["bash"] = "bash"


class BashAction(_Session):
    command: str = Field(max_length=1_000_000)
    timeout: float | None = Field(None, gt=0, le=24 * 3600)
    is_interactive_command: bool = False
    is_interactive_quit: bool = False
    check: Literal["silent", "raise", "ignore"] = "raise"
    error_msg: str = Field("", max_length=10_000)
    expect: list[Annotated[str, Field(min_length=1, max_length=1000)]] = Field([], max_length=32)
    action_type: Literal["bash"] = "bash"


class BashInterruptAction(_Session):
    timeout: float = Field(0.2, gt=0, le=600)
    n_retry: int = Field(3, ge=1, le=20)
    expect: list[Annotated[str, Field(min_length=1, max_length=1000)]] = Field([], max_length=32)
    action_type: Literal["bash_interrupt"] = "bash_interrupt"


Action = Annotated[BashAction | BashInterruptAction, Field(discriminator="action_type")]


class BashObservation(BaseModel):
    output: str = ""
    exit_code: int | None = None
    failure_reason: str = ""
    expect_string: str = ""
    session_type: Literal["bash"] = "bash"


class CloseBashSessionRequest(_Session):
    session_type: Literal["bash"] = "bash"


class CloseBashSessionResponse(BaseModel):
    session_type: Literal["bash"] = "bash"


class Command(BaseModel):
    command: str | list[str]
    timeout: float | None = Field(None, gt=0, le=24 * 3600)
    shell: bool = False
    check: bool = False
    error_msg: str = Field("", max_length=10_000)
    env: dict[str, str] | None = None
    cwd: str | None = Field(None, max_length=4096)
    merge_output_streams: bool = False


class CommandResponse(BaseModel):
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None


class ReadFileRequest(BaseModel):
    path: str = Field(min_length=1, max_length=4096)
    encoding: str | None = Field(None, max_length=64)
    errors: str | None = Field(None, max_length=64)


class ReadFileResponse(BaseModel):
    content: str = ""


class WriteFileRequest(BaseModel):
    content: str
    path: str = Field(min_length=1, max_length=4096)


class Empty(BaseModel):
    """WriteFileResponse, UploadResponse and CloseResponse: all empty."""


class SwerexToken(BaseModel):
    """What ``swerex.runtime.remote.RemoteRuntime(host=url, port=None, auth_token=token)`` needs."""

    url: str = Field(description="The runtime's base URL (host=url, port=None)")
    token: str = Field(description="X-API-Key for this sandbox's runtime only; shown once")
    rollout_id: str = Field(description="The rollout whose step log records this runtime's requests")


class ExceptionTransfer(BaseModel):
    """The body of a 511: the client imports ``class_path`` and raises it with ``message``."""

    message: str = ""
    class_path: str = ""
    traceback: str = ""
    extra_info: dict[str, Any] = {}
