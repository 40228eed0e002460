"""SandboxFusion compatibility: ``POST /run_code`` with SandboxFusion's request and response
JSON (sandbox_fusion.models.RunCodeRequest / RunCodeResponse), for python, cpp, c and bash.

The ``sandbox-fusion`` client sends no credentials, so the key can be put in the endpoint
path: ``sandbox_fusion.set_endpoint(f"{api}/sandboxfusion/{api_key}")``; ``/run_code`` with
``Authorization: Bearer`` works too.

Semantics follow SandboxFusion: ``run_timeout``/``compile_timeout`` are wall-clock seconds;
``run_result.status`` is ``Finished`` when the program ended by itself (any return code),
``TimeLimitExceeded`` when it was stopped for time, ``Error`` when it could not run; the
overall ``status`` is ``Success`` only when compile and run returned 0.
"""

from enum import Enum

from pydantic import BaseModel, Field

from corral_api.fncall.schemas import FncallRequest
from corral_common.contracts.fncall import CaseResult, CompileResult, FncallResult, Verdict

LANGUAGES = {"python": "python", "python3": "python", "cpp": "cpp", "c": "c", "bash": "bash"}
MEMORY_MB = 1024
OUTPUT_LIMIT_KB = 8 * 1024


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
    compile_timeout: float = Field(10, gt=0, le=60, description="compile timeout for compiled languages")
    run_timeout: float = Field(10, gt=0, le=60, description="code run timeout")
    code: str = Field(..., min_length=1, max_length=1_000_000, description="the code to run")
    stdin: str | None = Field(None, description="optional string to pass into stdin")
    language: str = Field(..., description="python, cpp, c or bash")
    files: dict[str, str | None] = Field({}, description="a dict from file path to base64 encoded file content")
    fetch_files: list[str] = Field([], description="a list of file paths to fetch after code execution")


class RunCodeResponse(BaseModel):
    status: RunStatus
    message: str
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = {}


def to_fncall(req: RunCodeRequest) -> tuple[FncallRequest, dict]:
    """The fncall request plus the job fields SandboxFusion needs beyond it."""
    files = {name.removeprefix("/work/").removeprefix("./"): content
             for name, content in req.files.items() if content is not None}
    call = FncallRequest(runtime=LANGUAGES[req.language], code=req.code, files=files, stdin=req.stdin or "",
                         time_limit_ms=int(req.run_timeout * 1000), memory_limit_mb=MEMORY_MB,
                         output_limit_kb=OUTPUT_LIMIT_KB)
    extra = {"wall_limit_ms": int(req.run_timeout * 1000), "compile_timeout_ms": int(req.compile_timeout * 1000),
             "fetch_files": list(req.fetch_files)}
    return call, extra


def _command(result: CompileResult | CaseResult) -> CommandRunResult:
    if result.verdict == Verdict.system_error:
        status = CommandRunStatus.Error
    elif result.verdict == Verdict.time_limit_exceeded:
        status = CommandRunStatus.TimeLimitExceeded
    else:
        status = CommandRunStatus.Finished
    return CommandRunResult(status=status, execution_time=round(result.wall_ms / 1000, 6),
                            cpu_time=round(result.time_ms / 1000, 6), return_code=result.exit_code,
                            stdout=result.stdout, stderr=result.stderr)


def from_fncall(result: FncallResult) -> RunCodeResponse:
    if result.verdict == Verdict.system_error and not result.cases and not result.compile:
        return RunCodeResponse(status=RunStatus.SandboxError, message=result.message)
    compile_result = run_result = None
    ok = True
    if result.compile:
        compile_result = _command(result.compile)
        ok = result.compile.verdict == Verdict.accepted
    if result.cases:
        case = result.cases[0]
        run_result = _command(case)
        ok = ok and case.exit_code == 0 and case.verdict == Verdict.accepted
    else:
        ok = False
    return RunCodeResponse(status=RunStatus.Success if ok else RunStatus.Failed, message="",
                           compile_result=compile_result, run_result=run_result,
                           executor_pod_name=result.node_id or None, files=result.files)
