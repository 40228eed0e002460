"""Rollouts that survive trainer preemption.

A rollout is a sandbox plus a durable trajectory log on the server. Every call below is one
*step* with an index the SDK counts for you (a cursor starting at 0). The server executes a
new index exactly once and answers an index it has already committed from the log, without
running it again. So a trainer that was killed just re-runs the same agent loop after
``attach``: the steps it had done are fast-forwarded from the log, a step that was
executing when it died is waited for (it still completes exactly once), and execution
continues live from there.

    with Corral() as corral:
        r = corral.rollouts.create("busybox", job_id="job-7", metadata={"episode": 3})
        r.exec("echo step >> log.txt")            # index 0
        r.write_file("notes.txt", "hi")           # index 1
        r.finish(reward=1.0)

    # after preemption, in a new process:
        r = corral.rollouts.attach(rollout_id)
        r.exec("echo step >> log.txt")            # index 0: answered from the log, not re-run

A different request at a committed index raises ``CorralError`` 409 ``step_mismatch`` (the
agent loop is not deterministic); a step whose action failed raises ``StepFailed`` (also on
replay); one the api lost while running raises ``StepInterrupted``. Either way the cursor
has moved past it.
"""

import base64
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Self

import httpx

from corral import _calls as calls
from corral._common import ExecResult, create_body, exec_body
from corral._transport import Flavored, Op, Sleep, operation
from corral.errors import CorralError, SandboxFailed
from corral_client.models import FileInfo
from corral_client.models import Rollout as RolloutInfo

# Transport failures and these statuses are retried: re-sending a step is always safe.
RETRY_STATUSES = frozenset({502, 503, 504})


class StepFailed(CorralError):
    """The step's action failed (e.g. a missing file). It is committed: a replay raises it again."""

    def __init__(self, step: "StepResult"):
        error = step.error or {}
        super().__init__(int(error.get("status", 500)), error.get("code", "step_failed"), error.get("message", ""))
        self.step = step


class StepInterrupted(StepFailed):
    """The api stopped while this step ran; it is never re-run (its effect is unknown)."""


@dataclass
class StepResult:
    index: int
    action: str
    args: dict[str, Any]
    status: str
    request_hash: str
    observation: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    duration_ms: float | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    replayed: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "StepResult":
        def ts(value: str | None) -> datetime | None:
            return datetime.fromisoformat(value) if value else None

        return cls(index=raw["index"], action=raw["action"], args=raw.get("args") or {}, status=raw["status"],
                   request_hash=raw["request_hash"], observation=raw.get("observation"), error=raw.get("error"),
                   duration_ms=raw.get("duration_ms"), started_at=ts(raw.get("started_at")),
                   finished_at=ts(raw.get("finished_at")), replayed=bool(raw.get("replayed")), raw=raw)

    def check(self) -> "StepResult":
        if self.status == "interrupted":
            raise StepInterrupted(self)
        if self.status != "done":
            raise StepFailed(self)
        return self


def _write_args(path: str, data: bytes | str, mode: int) -> dict[str, Any]:
    if isinstance(data, str):
        return {"path": path, "content": data, "encoding": "utf-8", "mode": mode}
    try:
        return {"path": path, "content": data.decode(), "encoding": "utf-8", "mode": mode}
    except UnicodeDecodeError:
        return {"path": path, "content": base64.b64encode(data).decode(), "encoding": "base64", "mode": mode}


def _file_bytes(observation: dict[str, Any]) -> bytes:
    content = observation.get("content", "")
    return base64.b64decode(content) if observation.get("encoding") == "base64" else content.encode()


def _create_json(environment: str | None, job_id: str, sandbox_id: str | None, metadata: dict[str, Any] | None,
                 idle_pause_s: float | None, ttl_s: float | None, spec: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"job_id": job_id, "metadata": metadata or {}}
    if sandbox_id is not None:
        if environment is not None or spec:
            raise ValueError("give an environment (and spec) for a new sandbox, or sandbox_id, not both")
        body["sandbox_id"] = sandbox_id
    else:
        if environment is None:
            raise ValueError("an environment (new sandbox) or sandbox_id (existing one) is required")
        body["sandbox"] = create_body(environment, **spec).to_dict()
    if idle_pause_s is not None:
        body["idle_pause_s"] = idle_pause_s
    if ttl_s is not None:
        body["ttl_s"] = ttl_s
    return body


def _check_created(info: RolloutInfo, wait: bool) -> None:
    state = str(info.sandbox_state) if isinstance(info.sandbox_state, str) or info.sandbox_state else None
    if wait and state in ("failed", "terminated"):
        raise SandboxFailed(info.sandbox_id, state, None)


class _RolloutOps(Flavored):
    """A rollout and its step cursor; ``Rollout`` (sync) and ``AsyncRollout`` run these operations."""

    def __init__(self, corral: Any, info: RolloutInfo, retry_timeout: float = 600.0):
        super().__init__(corral)
        self.info = info
        self.cursor = 0  # the index the next step call sends
        self.committed = info.step_count  # steps the server had when attached / last refreshed
        self.replayed = 0  # steps answered from the log so far
        self.retry_timeout = retry_timeout

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def sandbox_id(self) -> str:
        return self.info.sandbox_id

    @property
    def job_id(self) -> str:
        return self.info.job_id

    @property
    def status(self) -> str:
        return str(self.info.status)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, cursor={self.cursor}, committed={self.committed})"

    def _step(self, action: str, args: dict[str, Any]) -> Op[StepResult]:
        """Send the step at the cursor; retried on transport errors and 502/503/504 (safe: the
        server executes an index once). Raises StepFailed / StepInterrupted for such steps."""
        body = {"index": self.cursor, "action": action, "args": args}
        deadline = time.monotonic() + self.retry_timeout
        delay = 0.2
        while True:
            try:
                raw = yield calls.rollout_step(self.id, body)
                break
            except CorralError as error:
                if error.status not in RETRY_STATUSES or time.monotonic() > deadline:
                    raise
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
            yield Sleep(delay)
            delay = min(delay * 2, 5.0)
        step = StepResult.from_dict(raw)
        self.cursor = step.index + 1
        self.committed = max(self.committed, self.cursor)
        self.replayed += step.replayed
        return step.check()

    step = operation(_step)

    @operation
    def exec(self, cmd: list[str] | str, **kwargs: Any) -> Op[ExecResult]:
        """A command step; kwargs as Sandbox.exec (cwd, env, stdin, timeout_s, output_limit, user,
        output_encoding)."""
        step = yield from self._step("exec", exec_body(cmd, **kwargs).to_dict())
        return ExecResult.from_dict(step.observation or {})

    @operation
    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> Op[None]:
        yield from self._step("write_file", _write_args(path, data, mode))

    @operation
    def read_file(self, path: str, max_bytes: int = 1024 * 1024) -> Op[bytes]:
        step = yield from self._step("read_file", {"path": path, "max_bytes": max_bytes})
        return _file_bytes(step.observation or {})

    @operation
    def list_files(self, path: str = ".") -> Op[list[FileInfo]]:
        observation = (yield from self._step("list_files", {"path": path})).observation or {}
        return [FileInfo.from_dict(entry) for entry in observation.get("entries", [])]

    @operation
    def refresh(self) -> Op[Self]:
        self.info = RolloutInfo.from_dict((yield calls.get_rollout(self.id)))
        self.committed = self.info.step_count
        return self

    @operation
    def trajectory(self) -> Op[list[StepResult]]:
        """Every committed (or executing) step, in order, with observations and timings."""
        raw = yield calls.get_rollout(self.id)
        self.info = RolloutInfo.from_dict(raw)
        return [StepResult.from_dict(s) for s in raw.get("steps") or []]

    @operation
    def finish(self, reward: float | None = None, info: dict[str, Any] | None = None,
               keep_sandbox: bool | None = None) -> Op[Self]:
        body: dict[str, Any] = {"reward": reward, "info": info or {}}
        if keep_sandbox is not None:
            body["keep_sandbox"] = keep_sandbox
        self.info = yield calls.finish_rollout(self.id, body)
        return self


class Rollout(_RolloutOps, flavor="sync"):
    pass


class AsyncRollout(_RolloutOps, flavor="async"):
    pass


class _RolloutsOps(Flavored):
    _rollout: type[_RolloutOps]  # what this flavour returns

    @operation
    def create(self, environment: str | None = None, *, job_id: str, sandbox_id: str | None = None,
               metadata: dict[str, Any] | None = None, idle_pause_s: float | None = None, ttl_s: float | None = None,
               wait: bool = True, wait_timeout: float = 120.0, **spec: Any) -> Op[Any]:
        """A rollout on a new sandbox (``environment`` + spec as sandboxes.create) or an existing one."""
        body = _create_json(environment, job_id, sandbox_id, metadata, idle_pause_s, ttl_s, spec)
        info = yield calls.create_rollout(body, wait=wait, timeout=wait_timeout)
        _check_created(info, wait)
        return self._rollout(self._corral, info)

    @operation
    def attach(self, rollout_id: str) -> Op[Any]:
        """Resume a rollout from another process: the cursor starts at 0, so re-running the
        agent loop fast-forwards through the committed steps."""
        return self._rollout(self._corral, RolloutInfo.from_dict((yield calls.get_rollout(rollout_id))))

    @operation
    def list(self, job_id: str | None = None, status: str | None = None) -> Op[list[Any]]:
        return [self._rollout(self._corral, info) for info in (yield calls.list_rollouts(job_id, status))]


class Rollouts(_RolloutsOps, flavor="sync"):
    _rollout = Rollout


class AsyncRollouts(_RolloutsOps, flavor="async"):
    _rollout = AsyncRollout
