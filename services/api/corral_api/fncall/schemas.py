"""Public request/response shapes of /v1/fncall (and the settings of the api's fncall side)."""

import math
import re
from enum import Enum

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

RUNTIMES = ("python", "cpp", "c", "bash")
COMPILED = ("cpp", "c")
MAX_CODE_CHARS = 1_000_000
MAX_CASES = 1000
MAX_BATCH_CALLS = 10_000
_FLOAT = re.compile(r"^float:([0-9.eE+-]+)$")


class FncallApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_FNCALL_", extra="ignore")

    # Largest request body of one call / one batch (checked on Content-Length before reading).
    max_body_mb: int = 32
    batch_max_body_mb: int = 256
    # Largest total of stdin + expected output + files of one call once decoded.
    max_call_payload_mb: int = 16
    # How long a call may wait in a work queue for a free worker, on top of its own limits.
    queue_wait_s: float = 60.0
    max_wait_s: float = 600.0
    # Calls of one batch in flight at once (the rest wait in the api, not in the broker).
    batch_inflight: int = 256
    # Calls of a batch sent in one AMQP message (fewer for small batches; 1 = one message per call).
    batch_bundle: int = 8
    batch_ttl_s: int = 3600


class Verdict(str, Enum):
    accepted = "accepted"
    wrong_answer = "wrong_answer"
    time_limit_exceeded = "time_limit_exceeded"
    memory_limit_exceeded = "memory_limit_exceeded"
    output_limit_exceeded = "output_limit_exceeded"
    runtime_error = "runtime_error"
    compile_error = "compile_error"
    system_error = "system_error"


class TestCase(BaseModel):
    __test__ = False  # not a pytest class
    stdin: str = ""
    expected_stdout: str | None = Field(None, description="Compared with `compare`; omit to only run")


class FncallRequest(BaseModel):
    runtime: str = Field(..., description=f"One of {', '.join(RUNTIMES)} (GET /v1/fncall/runtimes)",
                         examples=["python"])
    code: str = Field(..., min_length=1, max_length=MAX_CODE_CHARS, examples=["print(sum(range(1000)))"])
    files: dict[str, str] = Field({}, description="Extra files in the working dir: relative path -> base64 content")
    stdin: str | None = Field(None, description="stdin of the single run when `tests` is omitted")
    tests: list[TestCase] | None = Field(None, max_length=MAX_CASES,
                                         description="Run once per case (compile once); omit for one run")
    time_limit_ms: int = Field(2000, ge=1, le=60_000, description="CPU time per case (all processes)")
    memory_limit_mb: int = Field(256, ge=16, le=4096, description="Memory (RSS + tmpfs, no swap) per case")
    output_limit_kb: int = Field(1024, ge=1, le=65_536, description="stdout (and stderr) per case")
    compare: str = Field("exact", description="exact | tokens | float:<eps> (absolute or relative error)")
    stop_on_failure: bool = Field(False, description="Skip the remaining cases after the first failing one")

    @field_validator("compare")
    @classmethod
    def _compare(cls, value: str) -> str:
        if value in ("exact", "tokens"):
            return value
        m = _FLOAT.match(value)
        if m:
            try:
                eps = float(m.group(1))
            except ValueError:
                eps = -1.0
            if eps >= 0 and math.isfinite(eps):
                return value
        raise ValueError("must be exact, tokens or float:<eps> such as float:1e-6")

    @field_validator("tests")
    @classmethod
    def _tests(cls, value: list[TestCase] | None) -> list[TestCase] | None:
        if value is not None and not value:
            raise ValueError("give at least one case, or omit tests for a single run")
        return value


class CaseResult(BaseModel):
    verdict: Verdict
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = Field("", description="Capped at output_limit_kb")
    stderr: str = Field("", description="Capped at 64 KiB")
    time_ms: float = Field(0.0, description="CPU time (user + sys) of every process of the run")
    wall_ms: float = 0.0
    memory_kb: int = Field(0, description="Peak memory of the run")


class CompileResult(BaseModel):
    verdict: Verdict
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    time_ms: float = 0.0
    wall_ms: float = 0.0


class FncallResponse(BaseModel):
    id: str
    runtime: str
    verdict: Verdict = Field(..., description="accepted, or the first failing case's verdict (or compile_error)")
    compile: CompileResult | None = None
    cases: list[CaseResult] = []
    node_id: str = ""
    latency_ms: float = Field(0.0, description="Time in the api, queueing included")
    message: str = ""


class RuntimeInfo(BaseModel):
    name: str
    compiled: bool
    queue_depth: int | None = None


class RuntimeList(BaseModel):
    items: list[RuntimeInfo]


class BatchRequest(BaseModel):
    calls: list[FncallRequest] = Field(..., min_length=1, max_length=MAX_BATCH_CALLS)


class BatchStatus(str, Enum):
    running = "running"
    done = "done"


class Batch(BaseModel):
    id: str
    status: BatchStatus
    total: int
    completed: int
    verdicts: dict[str, int] = Field({}, description="Overall verdicts of the completed calls")


class BatchItem(BaseModel):
    index: int = Field(..., description="Position of the call in the request")
    result: FncallResponse


class BatchPage(Batch):
    offset: int
    next_offset: int = Field(..., description="Offset of the next page (results are in completion order)")
    results: list[BatchItem]
