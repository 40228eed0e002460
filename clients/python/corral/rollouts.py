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

import asyncio
import base64
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import httpx

from corral._common import create_body, exec_body
from corral.errors import CorralError, SandboxFailed, raise_for
from corral_client.models import ExecResult, FileInfo
from corral_client.models import Rollout as RolloutInfo

if TYPE_CHECKING:
    from corral.aio import AsyncCorral
    from corral.client import Corral

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


class _RolloutBase:
    def __init__(self, info: RolloutInfo, retry_timeout: float):
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

    def _body(self, action: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"index": self.cursor, "action": action, "args": args}

    def _accept(self, response: httpx.Response) -> StepResult:
        raise_for(response.status_code, response.content)
        step = StepResult.from_dict(response.json())
        self.cursor = step.index + 1
        self.committed = max(self.committed, self.cursor)
        self.replayed += step.replayed
        return step.check()


class Rollout(_RolloutBase):
    def __init__(self, corral: "Corral", info: RolloutInfo, retry_timeout: float = 600.0):
        super().__init__(info, retry_timeout)
        self._corral = corral

    def step(self, action: str, args: dict[str, Any]) -> StepResult:
        """Send the step at the cursor; retried on transport errors and 502/503/504 (safe: the
        server executes an index once). Raises StepFailed / StepInterrupted for such steps."""
        body = self._body(action, args)
        deadline = time.monotonic() + self.retry_timeout
        delay = 0.2
        while True:
            try:
                response = self._corral.http.post(f"/v1/rollouts/{self.id}/steps", json=body)
                if response.status_code not in RETRY_STATUSES or time.monotonic() > deadline:
                    return self._accept(response)
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def exec(self, cmd: list[str] | str, **kwargs: Any) -> ExecResult:
        """A command step; kwargs as Sandbox.exec (cwd, env, stdin, timeout_s, output_limit, user)."""
        return ExecResult.from_dict(self.step("exec", exec_body(cmd, **kwargs).to_dict()).observation or {})

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self.step("write_file", _write_args(path, data, mode))

    def read_file(self, path: str, max_bytes: int = 1024 * 1024) -> bytes:
        return _file_bytes(self.step("read_file", {"path": path, "max_bytes": max_bytes}).observation or {})

    def list_files(self, path: str = ".") -> list[FileInfo]:
        observation = self.step("list_files", {"path": path}).observation or {}
        return [FileInfo.from_dict(entry) for entry in observation.get("entries", [])]

    def refresh(self) -> "Rollout":
        response = self._corral.http.get(f"/v1/rollouts/{self.id}")
        raise_for(response.status_code, response.content)
        self.info = RolloutInfo.from_dict(response.json())
        self.committed = self.info.step_count
        return self

    def trajectory(self) -> list[StepResult]:
        """Every committed (or executing) step, in order, with observations and timings."""
        response = self._corral.http.get(f"/v1/rollouts/{self.id}")
        raise_for(response.status_code, response.content)
        raw = response.json()
        self.info = RolloutInfo.from_dict(raw)
        return [StepResult.from_dict(s) for s in raw.get("steps") or []]

    def finish(self, reward: float | None = None, info: dict[str, Any] | None = None,
               keep_sandbox: bool | None = None) -> "Rollout":
        body: dict[str, Any] = {"reward": reward, "info": info or {}}
        if keep_sandbox is not None:
            body["keep_sandbox"] = keep_sandbox
        response = self._corral.http.post(f"/v1/rollouts/{self.id}/finish", json=body)
        raise_for(response.status_code, response.content)
        self.info = RolloutInfo.from_dict(response.json())
        return self


class Rollouts:
    def __init__(self, corral: "Corral"):
        self._corral = corral

    def create(self, environment: str | None = None, *, job_id: str, sandbox_id: str | None = None,
               metadata: dict[str, Any] | None = None, idle_pause_s: float | None = None, ttl_s: float | None = None,
               wait: bool = True, wait_timeout: float = 120.0, **spec: Any) -> Rollout:
        """A rollout on a new sandbox (``environment`` + spec as sandboxes.create) or an existing one."""
        body = _create_json(environment, job_id, sandbox_id, metadata, idle_pause_s, ttl_s, spec)
        response = self._corral.http.post("/v1/rollouts", json=body, params={"wait": wait, "timeout": wait_timeout})
        raise_for(response.status_code, response.content)
        info = RolloutInfo.from_dict(response.json())
        _check_created(info, wait)
        return Rollout(self._corral, info)

    def attach(self, rollout_id: str) -> Rollout:
        """Resume a rollout from another process: the cursor starts at 0, so re-running the
        agent loop fast-forwards through the committed steps."""
        response = self._corral.http.get(f"/v1/rollouts/{rollout_id}")
        raise_for(response.status_code, response.content)
        return Rollout(self._corral, RolloutInfo.from_dict(response.json()))

    def list(self, job_id: str | None = None, status: str | None = None) -> list[Rollout]:
        params = {k: v for k, v in {"job_id": job_id, "status": status}.items() if v is not None}
        response = self._corral.http.get("/v1/rollouts", params=params)
        raise_for(response.status_code, response.content)
        return [Rollout(self._corral, RolloutInfo.from_dict(item)) for item in response.json()["items"]]


class AsyncRollout(_RolloutBase):
    def __init__(self, corral: "AsyncCorral", info: RolloutInfo, retry_timeout: float = 600.0):
        super().__init__(info, retry_timeout)
        self._corral = corral

    async def step(self, action: str, args: dict[str, Any]) -> StepResult:
        body = self._body(action, args)
        deadline = time.monotonic() + self.retry_timeout
        delay = 0.2
        while True:
            try:
                response = await self._corral.http.post(f"/v1/rollouts/{self.id}/steps", json=body)
                if response.status_code not in RETRY_STATUSES or time.monotonic() > deadline:
                    return self._accept(response)
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def exec(self, cmd: list[str] | str, **kwargs: Any) -> ExecResult:
        return ExecResult.from_dict((await self.step("exec", exec_body(cmd, **kwargs).to_dict())).observation or {})

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        await self.step("write_file", _write_args(path, data, mode))

    async def read_file(self, path: str, max_bytes: int = 1024 * 1024) -> bytes:
        return _file_bytes((await self.step("read_file", {"path": path, "max_bytes": max_bytes})).observation or {})

    async def list_files(self, path: str = ".") -> list[FileInfo]:
        observation = (await self.step("list_files", {"path": path})).observation or {}
        return [FileInfo.from_dict(entry) for entry in observation.get("entries", [])]

    async def refresh(self) -> "AsyncRollout":
        response = await self._corral.http.get(f"/v1/rollouts/{self.id}")
        raise_for(response.status_code, response.content)
        self.info = RolloutInfo.from_dict(response.json())
        self.committed = self.info.step_count
        return self

    async def trajectory(self) -> list[StepResult]:
        response = await self._corral.http.get(f"/v1/rollouts/{self.id}")
        raise_for(response.status_code, response.content)
        raw = response.json()
        self.info = RolloutInfo.from_dict(raw)
        return [StepResult.from_dict(s) for s in raw.get("steps") or []]

    async def finish(self, reward: float | None = None, info: dict[str, Any] | None = None,
                     keep_sandbox: bool | None = None) -> "AsyncRollout":
        body: dict[str, Any] = {"reward": reward, "info": info or {}}
        if keep_sandbox is not None:
            body["keep_sandbox"] = keep_sandbox
        response = await self._corral.http.post(f"/v1/rollouts/{self.id}/finish", json=body)
        raise_for(response.status_code, response.content)
        self.info = RolloutInfo.from_dict(response.json())
        return self


class AsyncRollouts:
    def __init__(self, corral: "AsyncCorral"):
        self._corral = corral

    async def create(self, environment: str | None = None, *, job_id: str, sandbox_id: str | None = None,
                     metadata: dict[str, Any] | None = None, idle_pause_s: float | None = None,
                     ttl_s: float | None = None, wait: bool = True, wait_timeout: float = 120.0,
                     **spec: Any) -> AsyncRollout:
        body = _create_json(environment, job_id, sandbox_id, metadata, idle_pause_s, ttl_s, spec)
        response = await self._corral.http.post("/v1/rollouts", json=body,
                                                params={"wait": wait, "timeout": wait_timeout})
        raise_for(response.status_code, response.content)
        info = RolloutInfo.from_dict(response.json())
        _check_created(info, wait)
        return AsyncRollout(self._corral, info)

    async def attach(self, rollout_id: str) -> AsyncRollout:
        response = await self._corral.http.get(f"/v1/rollouts/{rollout_id}")
        raise_for(response.status_code, response.content)
        return AsyncRollout(self._corral, RolloutInfo.from_dict(response.json()))

    async def list(self, job_id: str | None = None, status: str | None = None) -> list[AsyncRollout]:
        params = {k: v for k, v in {"job_id": job_id, "status": status}.items() if v is not None}
        response = await self._corral.http.get("/v1/rollouts", params=params)
        raise_for(response.status_code, response.content)
        return [AsyncRollout(self._corral, RolloutInfo.from_dict(item)) for item in response.json()["items"]]
