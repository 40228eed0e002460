"""The fncall contract between the api and the node-agents' warm pools (JSON over AMQP).

The api publishes one call, a ``FncallJob``, on the durable work queue ``fncall.<runtime>``
(``queue_name``; every node consumes it, competing for calls) with ``reply_to`` and a
``correlation_id``; the worker that ran it replies with a ``FncallResult``, and acks the
call only once the broker confirmed the reply (a call is run again rather than lost). A batch's calls
travel in bundles: AMQP message ``type`` ``bundle`` (``BUNDLE``), body a ``JobBundle``
``{"jobs": [...]}``, answered by one ``ResultBundle`` ``{"results": [...]}`` in the same order.

Every message is made by its model's ``body()`` and read with ``model_validate_json``; the
bytes are those the two services sent before this module existed (pinned by
tests/unit/fncall/test_fncall_contract.py), so either side can be upgraded first. A job's body
holds only the fields the api set (``FncallJob.to_wire``); the node fills the same defaults
for the rest. The workers' limits and the api's deadline for a call come from the same
``wall_limit_ms`` / ``FncallJob.longest_run_s``.

The verdict and result models are also the public ``/v1/fncall`` response's parts: their
class names, field descriptions and the absence of class docstrings are part of the OpenAPI
document (clients/python/openapi.json).
"""

import json
import math
import re
from enum import Enum
from typing import Any, Literal

from aio_pika.abc import AbstractChannel, AbstractQueue, AbstractRobustConnection
from pydantic import BaseModel, Field

from corral_common.amqp import declare_quorum_queue

RUNTIMES: tuple[str, ...] = ("python", "cpp", "c", "bash", "pytest", "go", "java", "nodejs", "typescript", "rust",
                              "ruby", "php", "lua", "perl")
# Compiled once per call before the cases run.
COMPILED: tuple[str, ...] = ("cpp", "c", "go", "java", "typescript", "rust")

QUEUE_PREFIX = "fncall."
BUNDLE = "bundle"  # AMQP message type of several calls in one message

# A case's wall-clock limit unless the job sets one: its CPU limit times WALL_FACTOR plus
# WALL_EXTRA_MS, so a program that sleeps or blocks is stopped too, not only one that computes.
WALL_FACTOR = 2.0
WALL_EXTRA_MS = 500

_FLOAT = re.compile(r"^float:([0-9.eE+-]+)$")


def queue_name(runtime: str) -> str:
    return f"{QUEUE_PREFIX}{runtime}"


async def declare_work_queue(connection: AbstractRobustConnection, channel: AbstractChannel,
                             runtime: str) -> AbstractQueue:
    """The api and every node declare it the same way (a durable quorum queue: its calls
    survive a broker restart), so a burst queues even before any node consumes it. Older
    versions made it classic: ``declare_quorum_queue`` converts it once nothing uses it."""
    return await declare_quorum_queue(connection, channel, queue_name(runtime))


def wall_limit_ms(time_limit_ms: int, explicit: int | None = None) -> int:
    """A case's wall-clock limit: ``explicit`` (SandboxFusion's run_timeout) or derived from its CPU limit."""
    return explicit or int(time_limit_ms * WALL_FACTOR + WALL_EXTRA_MS)


def parse_compare(mode: str) -> tuple[Literal["exact", "tokens", "float"], float]:
    """``exact``, ``tokens`` or ``float:<eps>`` (eps finite and >= 0) as (kind, eps); ValueError otherwise."""
    if mode == "exact":
        return "exact", 0.0
    if mode == "tokens":
        return "tokens", 0.0
    m = _FLOAT.match(mode)
    if m:
        try:
            eps = float(m.group(1))
        except ValueError:
            eps = -1.0
        if eps >= 0 and math.isfinite(eps):
            return "float", eps
    raise ValueError("must be exact, tokens or float:<eps> such as float:1e-6")


def safe_relpath(name: str) -> str:
    """A file name relative to the working dir; raises ValueError for anything escaping it."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or name.startswith("/") or ".." in parts or "\0" in name:
        raise ValueError(f"file name {name!r} must be a relative path inside the working dir")
    return "/".join(parts)


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
    expected_stdout: str | None = None  # None: only run, do not judge the output


class FncallJob(BaseModel):
    """One call: compile once (if the runtime compiles), then run every case."""

    # (Field order is the order on the wire.)
    call_id: str
    runtime: str
    code: str
    # (Mutable defaults as factories: a plain [] or {} default is deep-copied per instance, slower.)
    files: dict[str, str] = Field(default_factory=dict)  # relative path -> base64 content
    cases: list[JobCase] = Field(default_factory=lambda: [JobCase()])
    time_limit_ms: int = 2000  # cpu time per case (every process of the run)
    memory_limit_mb: int = 256
    output_limit_kb: int = 1024
    compare: str = "exact"  # see parse_compare
    compile_timeout_ms: int = 10000
    stop_on_failure: bool = False
    wall_limit_ms: int | None = None  # default: wall_limit_ms(time_limit_ms)
    fetch_files: list[str] = Field(default_factory=list)  # SandboxFusion: files read back after the (last) run

    def to_wire(self) -> dict[str, Any]:
        """The message body as a JSON object: the fields the sender set."""
        return self.model_dump(exclude_unset=True)

    def body(self) -> bytes:
        return json.dumps(self.to_wire()).encode()

    def case_wall_ms(self) -> int:
        return wall_limit_ms(self.time_limit_ms, self.wall_limit_ms)

    def longest_run_s(self) -> float:
        """The longest a worker may take for this call: the compile (at its timeout) and every
        case at its wall limit."""
        compile_ms = self.compile_timeout_ms if self.runtime in COMPILED else 0
        return (compile_ms + self.case_wall_ms() * len(self.cases)) / 1000


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
    verdict: Verdict  # accepted, compile_error, time_limit_exceeded (compile timeout) or system_error
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    time_ms: float = 0.0
    wall_ms: float = 0.0


class FncallResult(BaseModel):
    call_id: str
    runtime: str
    verdict: Verdict  # accepted, or the first failing case's (compile_error when the compile failed)
    compile: CompileResult | None = None
    cases: list[CaseResult] = Field(default_factory=list)
    node_id: str = ""
    worker: str = ""
    files: dict[str, str] = Field(default_factory=dict)  # fetched files, base64
    message: str = ""

    def body(self) -> bytes:
        return self.model_dump_json().encode()


class JobBundle(BaseModel):
    jobs: list[FncallJob]

    def body(self) -> bytes:
        return json.dumps({"jobs": [job.to_wire() for job in self.jobs]}).encode()


class ResultBundle(BaseModel):
    results: list[FncallResult]

    def body(self) -> bytes:
        return json.dumps(self.model_dump(mode="json")).encode()
