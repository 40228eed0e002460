"""Rollout request/response bodies, step argument models, and the request hash."""

import hashlib
import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from corral_api.sandboxes.schemas import SandboxCreate
from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxState
from corral_common.inputs import INPUT_ERROR_CODES, storable_text, valid_id
from corral_common.web.errors import Unprocessable

Action = Literal["exec", "write_file", "read_file", "list_files"]
StepStatus = Literal["pending", "done", "failed", "interrupted"]
RolloutStatus = Literal["active", "paused", "finished", "expired"]
FilePathField = Field(min_length=1, max_length=4096, description="Absolute, or relative to the home dir")


class ExecArgs(ExecRequest):
    model_config = ConfigDict(extra="forbid")


class WriteFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = FilePathField
    content: str = Field("", description="The file's text, or base64 when encoding=base64")
    encoding: Literal["utf-8", "base64"] = "utf-8"
    mode: int = Field(0o644, ge=0, le=0o777)


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = FilePathField
    max_bytes: int = Field(1024 * 1024, ge=1, le=16 * 1024 * 1024, description="Bytes kept in the log")


class ListFilesArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(".", min_length=1, max_length=4096)


ARGS: dict[str, type[BaseModel]] = {"exec": ExecArgs, "write_file": WriteFileArgs, "read_file": ReadFileArgs,
                                    "list_files": ListFilesArgs}


# Fields added after rollouts shipped are left out of the normalized args while at their
# default: a step logged before a field existed keeps its hash (a replay still matches).
_LATER_FIELDS: dict[str, dict[str, Any]] = {"exec": {"output_encoding": "utf-8"}}


def normalize_args(action: str, args: dict[str, Any], model: type[BaseModel] | None = None) -> dict[str, Any]:
    """Validate a step's args (against ``model``, default the action's own) and fill defaults,
    so equal requests hash equally. 422 otherwise."""
    try:
        normalized = (model or ARGS[action]).model_validate(args).model_dump(mode="json")
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ["body", "args", *first.get("loc", ())]
        code = first["type"] if first["type"] in INPUT_ERROR_CODES else "validation_error"
        raise Unprocessable(f"args for {action}: {'.'.join(map(str, first.get('loc', ())))}: {first['msg']}",
                            loc=loc, code=code) from None
    for name, default in _LATER_FIELDS.get(action, {}).items():
        if normalized.get(name) == default:
            del normalized[name]
    return normalized


def request_hash(action: str, args: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of (action, normalized args)."""
    canonical = json.dumps({"action": action, "args": args}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class StepRequest(BaseModel):
    """Body of ``POST /v1/rollouts/{id}/steps``."""

    index: int = Field(ge=0, le=1_000_000, description="0-based; the next index, or one already committed (replay)")
    action: Action
    args: dict[str, Any] = Field(default_factory=dict, description="ExecRequest for exec; {path, content, encoding, "
                                 "mode} for write_file; {path, max_bytes} for read_file; {path} for list_files")


class StepError(BaseModel):
    status: int
    code: str
    message: str


class Step(BaseModel):
    index: int
    action: str = Field(description="One of StepRequest's actions, or an adapter's (swerex.*) for steps it logged")
    args: dict[str, Any]
    request_hash: str
    status: StepStatus
    observation: dict[str, Any] | None = None
    error: StepError | None = None
    started_at: datetime
    finished_at: datetime | None = None
    duration_ms: float | None = None
    replayed: bool = Field(False, description="Answered from the log, not executed by this request")
    replays: int = Field(0, description="Times this step was answered from the log (re-sent requests)")


class RolloutCreate(BaseModel):
    """Body of ``POST /v1/rollouts``: a new sandbox (``sandbox``) or an existing one (``sandbox_id``)."""

    model_config = ConfigDict(extra="forbid")

    job_id: str = Field(min_length=1, max_length=200, description="The training job this rollout belongs to")
    metadata: dict[str, Any] = Field(default_factory=dict)
    sandbox: SandboxCreate | None = Field(None, description="Spec of a new sandbox, as in POST /v1/sandboxes")
    sandbox_id: str | None = Field(None, min_length=1, max_length=64, description="Bind an existing sandbox")
    idle_pause_s: float | None = Field(None, ge=0, le=7 * 24 * 3600,
                                       description="Pause the sandbox after this idle time (0: never); "
                                                   "default CORRAL_ROLLOUT_IDLE_PAUSE_S")
    ttl_s: float | None = Field(None, gt=0, le=30 * 24 * 3600,
                                description="Release the sandbox after this idle time; default CORRAL_ROLLOUT_TTL_S")

    _job_id = field_validator("job_id")(storable_text)
    _sandbox_id = field_validator("sandbox_id")(valid_id)

    @model_validator(mode="after")
    def _one_sandbox(self) -> "RolloutCreate":
        if (self.sandbox is None) == (self.sandbox_id is None):
            raise ValueError("give exactly one of sandbox (a new one) or sandbox_id (an existing one)")
        if len(json.dumps(self.metadata)) > 64 * 1024:
            raise ValueError("metadata must be at most 64 KiB of JSON")
        return self


class RolloutFinish(BaseModel):
    reward: float | None = None
    info: dict[str, Any] = Field(default_factory=dict)
    keep_sandbox: bool | None = Field(None, description="Default: delete the sandbox if the rollout created it, "
                                                        "keep (and resume) it if it was given")


class Rollout(BaseModel):
    id: str
    job_id: str
    sandbox_id: str
    sandbox_state: SandboxState | None = None
    owns_sandbox: bool
    metadata: dict[str, Any]
    status: RolloutStatus
    step_count: int = Field(description="Steps committed or executing (the next index)")
    idle_pause_s: float
    ttl_s: float
    reward: float | None = None
    info: dict[str, Any] | None = None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    steps: list[Step] | None = Field(None, description="The trajectory (GET /v1/rollouts/{id} only)")


class RolloutList(BaseModel):
    items: list[Rollout]
