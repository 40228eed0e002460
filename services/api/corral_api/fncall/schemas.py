"""Public request/response shapes of /v1/fncall. The verdict and the per-run results are the
wire contract's (corral_common.contracts.fncall), as the workers send them."""

from enum import Enum

from pydantic import BaseModel, Field, field_validator

from corral_common.contracts.fncall import RUNTIMES, CaseResult, CompileResult, Verdict, parse_compare

MAX_CODE_CHARS = 1_000_000
MAX_CASES = 1000
MAX_BATCH_CALLS = 10_000


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
        parse_compare(value)
        return value

    @field_validator("tests")
    @classmethod
    def _tests(cls, value: list[TestCase] | None) -> list[TestCase] | None:
        if value is not None and not value:
            raise ValueError("give at least one case, or omit tests for a single run")
        return value


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
