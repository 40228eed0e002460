"""The sandbox vocabulary every service shares: the request spec, states and transitions."""

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field, field_validator

LABEL_KEY_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.\-/]{0,62}[A-Za-z0-9])?$"


class SandboxState(StrEnum):
    pending = "pending"
    scheduled = "scheduled"
    starting = "starting"
    running = "running"
    paused = "paused"
    stopping = "stopping"
    terminated = "terminated"
    failed = "failed"


TERMINAL_STATES = frozenset({SandboxState.terminated, SandboxState.failed})

# Which state may follow which. Anything may fail; terminal states are final.
ALLOWED_TRANSITIONS: dict[SandboxState, frozenset[SandboxState]] = {
    SandboxState.pending: frozenset({SandboxState.scheduled, SandboxState.stopping, SandboxState.terminated,
                                     SandboxState.failed}),
    SandboxState.scheduled: frozenset({SandboxState.starting, SandboxState.stopping, SandboxState.terminated,
                                       SandboxState.failed}),
    SandboxState.starting: frozenset({SandboxState.running, SandboxState.stopping, SandboxState.failed}),
    SandboxState.running: frozenset({SandboxState.paused, SandboxState.stopping, SandboxState.failed}),
    SandboxState.paused: frozenset({SandboxState.running, SandboxState.stopping, SandboxState.failed}),
    SandboxState.stopping: frozenset({SandboxState.terminated, SandboxState.failed}),
    SandboxState.terminated: frozenset(),
    SandboxState.failed: frozenset(),
}


def can_transition(current: SandboxState | str, target: SandboxState | str) -> bool:
    return SandboxState(target) in ALLOWED_TRANSITIONS[SandboxState(current)]


class FailureReason(StrEnum):
    node_lost = "node_lost"
    lost_on_restart = "lost_on_restart"  # its node-agent restarted and its processes were gone
    oom_killed = "oom_killed"
    exited = "exited"
    start_failed = "start_failed"
    image_unavailable = "image_unavailable"
    unschedulable = "unschedulable"


Backend = Literal["container", "auto"]


class SandboxSpec(BaseModel):
    """What a caller asks for. Validated once at the api; trusted by the services behind it."""

    environment: str = Field(min_length=1, max_length=200, description="Environment name (image-service)")
    backend: Backend = "auto"
    cpu: float = Field(1.0, gt=0, le=64, description="CPU cores (cgroup quota)")
    memory_mb: int = Field(256, ge=16, le=262144)
    disk_mb: int = Field(1024, ge=16, le=1048576, description="Size of the writable upper layer")
    timeout_s: int = Field(3600, ge=1, le=7 * 24 * 3600, description="Wall-clock lifetime; the sandbox is ended after it")
    pids_limit: int = Field(512, ge=8, le=65536)
    env: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    network: Literal["none"] = "none"

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not name or "=" in name or "\0" in name or len(name) > 256:
                raise ValueError(f"invalid environment variable name {name!r}")
        if len(value) > 256:
            raise ValueError("at most 256 environment variables")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        import re

        if len(value) > 64:
            raise ValueError("at most 64 labels")
        for key, val in value.items():
            if not re.match(LABEL_KEY_PATTERN, key):
                raise ValueError(f"invalid label key {key!r}")
            if len(val) > 256 or "\n" in val:
                raise ValueError(f"invalid label value for {key!r}")
        return value


class Usage(BaseModel):
    cpu_seconds: float = 0.0
    peak_memory_bytes: int = 0
    wall_time_s: float = 0.0
    oom_kills: int = 0
