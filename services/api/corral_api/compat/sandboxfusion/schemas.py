"""SandboxFusion's models (sandbox_fusion.models, sandbox-fusion 0.3.7) field for field. Extra keys
are ignored as upstream does (ROLL sends ``expected_stdout``); verl's ``memory_limit_MB`` is read."""

from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Upstream's Language literal: a name outside it is a 422, as upstream answers; a name in it that
# this server has no toolchain for is a SandboxError with the list of those it has.
UPSTREAM_LANGUAGES = ("python", "python2", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash",
                      "typescript", "sql", "rust", "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia",
                      "pytest", "junit", "kotlin_script", "jest", "verilog", "python_gpu", "lean", "swift", "racket",
                      "gtest", "react")
# Corral's own names beyond upstream's (the adapter has always taken them).
EXTRA_LANGUAGES = ("c", "python3")
Language = Literal[UPSTREAM_LANGUAGES + EXTRA_LANGUAGES]  # type: ignore[valid-type]


class CommandRunStatus(str, Enum):
    Finished = "Finished"
    Error = "Error"
    TimeLimitExceeded = "TimeLimitExceeded"


class RunStatus(str, Enum):
    Success = "Success"
    Failed = "Failed"
    SandboxError = "SandboxError"


class CommandRunResult(BaseModel):
    status: CommandRunStatus
    execution_time: float | None = None
    cpu_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    compile_timeout: float = Field(10, gt=0, le=300, description="compile timeout for compiled languages")
    run_timeout: float = Field(10, gt=0, le=60, description="code run timeout (at most fncall's 60 s per case)")
    code: str = Field(..., max_length=1_000_000, description="the code to run")
    stdin: str | None = Field(None, description="optional string to pass into stdin")
    # Required upstream; python by default here so verl's tutorial body ({"code": ...}) runs.
    language: Language = Field("python", description="the language or execution mode to run the code")
    files: dict[str, str | None] = Field({}, description="a dict from file path to base64 encoded file content")
    fetch_files: list[str] = Field([], max_length=256, description="a list of file paths to fetch after code "
                                                                    "execution")
    memory_limit_mb: int = Field(-1, alias="memory_limit_MB", ge=-1, le=64 * 1024,
                                 description="verl's field: the run's memory limit (-1: the server's default)")


class RunCodeResponse(BaseModel):
    status: RunStatus
    message: str
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = {}
