"""Wire format between the api and the warm-pool workers (JSON over the ``fncall.<runtime>`` queues)."""

from enum import Enum

from pydantic import BaseModel, Field


class Verdict(str, Enum):
    accepted = "accepted"
    wrong_answer = "wrong_answer"
    time_limit_exceeded = "time_limit_exceeded"
    memory_limit_exceeded = "memory_limit_exceeded"
    output_limit_exceeded = "output_limit_exceeded"
    runtime_error = "runtime_error"
    compile_error = "compile_error"
    system_error = "system_error"


class JobCase(BaseModel):
    stdin: str = ""
    expected_stdout: str | None = None


class FncallJob(BaseModel):
    """One call: compile once (if the runtime compiles), then run every case."""

    call_id: str
    runtime: str
    code: str
    files: dict[str, str] = {}  # relative path -> base64 content
    cases: list[JobCase] = Field(default_factory=lambda: [JobCase()])
    time_limit_ms: int = 2000
    memory_limit_mb: int = 256
    output_limit_kb: int = 1024
    compare: str = "exact"
    compile_timeout_ms: int = 10000
    wall_limit_ms: int | None = None  # default: derived from time_limit_ms
    stop_on_failure: bool = False
    fetch_files: list[str] = []  # SandboxFusion: files read back after the (last) run


class CaseResult(BaseModel):
    verdict: Verdict
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    time_ms: float = 0.0  # cpu time (user + sys) of everything the run started
    wall_ms: float = 0.0
    memory_kb: int = 0  # peak memory of the run's cgroup


class CompileResult(BaseModel):
    verdict: Verdict  # accepted, compile_error, time_limit_exceeded (compile timeout) or system_error
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    time_ms: float = 0.0
    wall_ms: float = 0.0


class FncallResult(BaseModel):
    call_id: str
    runtime: str
    verdict: Verdict
    compile: CompileResult | None = None
    cases: list[CaseResult] = []
    node_id: str = ""
    worker: str = ""
    files: dict[str, str] = {}  # fetched files, base64
    message: str = ""
