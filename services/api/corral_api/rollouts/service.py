"""Rollouts: a sandbox plus a durable trajectory log, so a preempted trainer resumes without
repeating a step.

Exactly once, step by step:
1. ``claim``: the step row is inserted as ``pending`` with the hash of its request (the
   primary key (rollout_id, index) lets only one request claim an index).
2. The action runs in a server-side task, not in the HTTP request: a caller that dies or
   drops its connection does not cancel it. While it runs the task renews a lease on the row.
3. The observation is committed (``done``, or ``failed`` if the action raised) and only then
   answered. Any later request for that index (same hash) gets the logged answer without
   executing; one still ``pending`` waits for the task (in-process future, or polling the row
   when another api process runs it).
4. If the api itself dies mid-step, the lease lapses and the step becomes ``interrupted``: it
   is never re-run, because whether it took effect is unknown.
"""

import asyncio
import base64
import secrets
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from corral_api.dataplane.service import SandboxDataPath
from corral_api.rollouts.models import RolloutRow, RolloutStepRow
from corral_api.rollouts.repository import RolloutRepository, now_dt
from corral_api.rollouts.schemas import (
    Rollout,
    RolloutCreate,
    RolloutFinish,
    Step,
    StepError,
    StepRequest,
    normalize_args,
    request_hash,
)
from corral_api.sandboxes.service import SandboxService
from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import TERMINAL_STATES, SandboxState
from corral_common.logging import get_logger
from corral_common.web.errors import Conflict, CorralError, NotFound, PayloadTooLarge, ServiceUnavailable, Unprocessable

log = get_logger(__name__)

_STARTING = (SandboxState.pending, SandboxState.scheduled, SandboxState.starting)


@dataclass(frozen=True)
class ExtraAction:
    """A step action an adapter adds (not on the public steps endpoint): its args model and
    what performs it; the observation it returns is what the log keeps and replays."""

    args: type[BaseModel]
    perform: Callable[[RolloutRow, dict[str, Any]], Awaitable[dict[str, Any]]]


class RolloutService:
    def __init__(self, repo: RolloutRepository, sandboxes: SandboxService, data: SandboxDataPath, *,
                 idle_pause_s: float, ttl_s: float, lease_s: float = 10.0, max_write_bytes: int = 100 << 20,
                 sandbox_wait_s: float = 120.0):
        self.repo = repo
        self.sandboxes = sandboxes
        self.data = data
        self.idle_pause_s = idle_pause_s
        self.ttl_s = ttl_s
        self.lease_s = lease_s
        self.max_write_bytes = max_write_bytes
        self.sandbox_wait_s = sandbox_wait_s
        self.executor = f"api-{secrets.token_hex(6)}"
        self._tasks: dict[tuple[str, int], asyncio.Task] = {}
        # One claim / pause / finish at a time per rollout (within this process).
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        # Keyed steps of one rollout run one after another (the next index is only known then).
        self._keyed: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.extra_actions: dict[str, ExtraAction] = {}

    def register_action(self, name: str, action: ExtraAction) -> None:
        self.extra_actions[name] = action

    async def _db(self, fn, *args, **kwargs):
        return await asyncio.to_thread(fn, *args, **kwargs)

    # ---- records ----------------------------------------------------------------------

    async def _row(self, tenant: str, rollout_id: str) -> RolloutRow:
        row = await self._db(self.repo.get, rollout_id)
        if row is None or row.tenant != tenant:  # another tenant's rollout looks missing
            raise NotFound(f"rollout {rollout_id} not found", loc=["path", "rollout_id"])
        return row

    async def _sandbox_state(self, row: RolloutRow) -> SandboxState | None:
        try:
            return (await self.sandboxes.get(row.tenant, row.sandbox_id)).state
        except NotFound:
            return None

    async def _view(self, row: RolloutRow, steps: list[RolloutStepRow] | None = None) -> Rollout:
        return Rollout(
            id=row.id, job_id=row.job_id, sandbox_id=row.sandbox_id, sandbox_state=await self._sandbox_state(row),
            owns_sandbox=row.owns_sandbox, metadata=row.meta, status=row.status, step_count=row.step_count,
            idle_pause_s=row.idle_pause_s, ttl_s=row.ttl_s, reward=row.reward, info=row.info,
            created_at=row.created_at, updated_at=row.updated_at, finished_at=row.finished_at,
            steps=[step_view(s) for s in steps] if steps is not None else None)

    def _deadlines(self, row: RolloutRow, *, idle: bool) -> dict[str, float | None]:
        now = time.time()
        return {"pause_at": now + row.idle_pause_s if idle and row.idle_pause_s > 0 else None,
                "expires_at": now + row.ttl_s}

    # ---- create / get / list / finish -------------------------------------------------

    async def create(self, tenant: str, body: RolloutCreate, *, wait: bool, timeout_s: float) -> Rollout:
        if body.sandbox_id is not None:
            record = await self.sandboxes.get(tenant, body.sandbox_id)
            if record.state in TERMINAL_STATES:
                raise Conflict(f"sandbox {record.id} is {record.state.value}", loc=["body", "sandbox_id"],
                               code="sandbox_not_running")
            owns = False
        else:
            assert body.sandbox is not None
            record = await self.sandboxes.create(tenant, body.sandbox)
            owns = True
        idle = self.idle_pause_s if body.idle_pause_s is None else body.idle_pause_s
        ttl = body.ttl_s or self.ttl_s
        now = now_dt()
        row = RolloutRow(id=f"ro-{secrets.token_hex(8)}", tenant=tenant, job_id=body.job_id, sandbox_id=record.id,
                         owns_sandbox=owns, meta=body.metadata, status="active", idle_pause_s=idle, ttl_s=ttl,
                         pause_at=time.time() + idle if idle > 0 else None, expires_at=time.time() + ttl,
                         created_at=now, updated_at=now)
        try:
            await self._db(self.repo.create, row)
        except Exception:
            if owns:  # no rollout row (the database is away): do not leave its sandbox running unseen
                await self._release(row, keep=False)
            raise
        log.info("rollout.created", rollout_id=row.id, sandbox_id=record.id, job_id=body.job_id, owns_sandbox=owns)
        if wait:
            await self.sandboxes.wait(tenant, record.id, SandboxState.running, timeout_s)
        return await self._view(row)

    async def get(self, tenant: str, rollout_id: str) -> Rollout:
        row = await self._row(tenant, rollout_id)
        return await self._view(row, list(await self._db(self.repo.steps, rollout_id)))

    async def list(self, tenant: str, job_id: str | None, status: str | None, limit: int) -> list[Rollout]:
        rows = await self._db(self.repo.list, tenant, job_id, status, limit)
        return [await self._view(row) for row in rows]

    async def finish(self, tenant: str, rollout_id: str, body: RolloutFinish) -> Rollout:
        async with self._locks[rollout_id]:
            row = await self._row(tenant, rollout_id)
            if row.status in ("finished", "expired"):
                if row.status == "finished" and (row.reward, row.info) == (body.reward, body.info):
                    return await self._view(row)  # a retried finish
                raise Conflict(f"rollout {rollout_id} is {row.status}", loc=["path", "rollout_id"],
                               code="rollout_finished")
            if await self._db(self.repo.has_pending, rollout_id):
                raise Conflict(f"rollout {rollout_id} has a step still executing", code="step_in_progress")
            # The sandbox first, then the row: a finish that fails in between (503) is done
            # again whole by its retry; the other way round the retry would find it finished
            # and leave the sandbox running.
            keep = body.keep_sandbox if body.keep_sandbox is not None else not row.owns_sandbox
            await self._release(row, keep=keep)
            await self._db(self.repo.update, rollout_id, status="finished", reward=body.reward, info=body.info,
                           finished_at=now_dt(), pause_at=None, expires_at=None)
            log.info("rollout.finished", rollout_id=rollout_id, reward=body.reward, kept_sandbox=keep)
            return await self._view(await self._row(tenant, rollout_id))

    async def _release(self, row: RolloutRow, *, keep: bool) -> None:
        """Delete the sandbox, or hand it back running. Best effort: it may have ended already."""
        try:
            if not keep:
                await self.sandboxes.delete(row.tenant, row.sandbox_id)
            elif await self._sandbox_state(row) is SandboxState.paused:
                await self.data.resume(row.tenant, row.sandbox_id)
        except ServiceUnavailable:
            raise  # not done (the broker or a node is away): the caller retries
        except CorralError as exc:
            log.warning("rollout.release_failed", rollout_id=row.id, sandbox_id=row.sandbox_id, error=exc.message)

    # ---- steps ------------------------------------------------------------------------

    async def keyed_step(self, tenant: str, rollout_id: str, key: str, action: str, args: dict[str, Any]) -> Step:
        """A step named by the caller's idempotency key instead of an index: executed once at
        the next index the first time the key comes, answered from the log (or waited for)
        when it comes again; the same key with another request is a 409 ``step_mismatch``."""
        existing = await self._db(self.repo.step_by_key, rollout_id, key)
        if existing is None:
            async with self._keyed[rollout_id]:
                existing = await self._db(self.repo.step_by_key, rollout_id, key)
                if existing is None:
                    row = await self._row(tenant, rollout_id)
                    if row.step_count and await self._db(self.repo.has_pending, rollout_id):
                        # One whose caller went away (it runs on server-side): the next waits for it.
                        await self._await_step(rollout_id, row.step_count - 1)
                        row = await self._row(tenant, rollout_id)
                    req = StepRequest.model_construct(index=row.step_count, action=action, args=args)
                    return await self.step(tenant, rollout_id, req, request_key=key)
        req = StepRequest.model_construct(index=existing.step_index, action=action, args=args)
        return await self.step(tenant, rollout_id, req, request_key=key)

    async def step(self, tenant: str, rollout_id: str, req: StepRequest, *, request_key: str | None = None) -> Step:
        extra = self.extra_actions.get(req.action)
        args = normalize_args(req.action, req.args, extra.args if extra else None)
        digest = request_hash(req.action, args)
        row, existing, _ = await self._db(self.repo.lookup, rollout_id, req.index)
        if row is None or row.tenant != tenant:
            raise NotFound(f"rollout {rollout_id} not found", loc=["path", "rollout_id"])
        task = None
        if existing is None:
            async with self._locks[rollout_id]:
                row, existing, pending = await self._db(self.repo.lookup, rollout_id, req.index)
                assert row is not None
                if existing is None:
                    task = await self._claim(row, req, args, digest, pending, request_key)
                    if task is None:  # another api process claimed the index first
                        existing = await self._db(self.repo.step, rollout_id, req.index)
        if task is not None:
            return step_view(await asyncio.shield(task))  # a caller that goes away must not cancel it
        assert existing is not None
        if existing.request_hash != digest:
            raise Conflict(f"step {req.index} of rollout {rollout_id} was committed with a different request "
                           f"({existing.action}, hash {existing.request_hash[:12]}…): the agent loop diverged",
                           loc=["body", "index"], code="step_mismatch",
                           extra={"committed": {"action": existing.action, "request_hash": existing.request_hash}})
        done = await self._await_step(rollout_id, req.index) if existing.status == "pending" else existing
        view = step_view(done)
        view.replayed = True
        view.replays = await self._db(self.repo.count_replay, rollout_id, req.index)
        return view

    async def _claim(self, row: RolloutRow, req: StepRequest, args: dict[str, Any], digest: str,
                     pending: bool, request_key: str | None = None) -> "asyncio.Task[RolloutStepRow] | None":
        """Under the rollout's lock: check the index, make the sandbox runnable, insert the
        pending row and start the task. None when another api process claimed the index first."""
        if req.index > row.step_count:
            raise Unprocessable(f"step {req.index} skips ahead: rollout {row.id} has {row.step_count} steps, "
                                f"the next index is {row.step_count}", loc=["body", "index"], code="step_skipped")
        if row.status in ("finished", "expired"):
            raise Conflict(f"rollout {row.id} is {row.status}; only committed steps can be replayed",
                           loc=["path", "rollout_id"], code="rollout_finished")
        if pending:
            raise Conflict(f"rollout {row.id} has a step still executing; send that index again to wait for it",
                           loc=["body", "index"], code="step_in_progress")
        await self._ensure_running(row)
        step = RolloutStepRow(rollout_id=row.id, step_index=req.index, action=req.action, args=args,
                              request_hash=digest, request_key=request_key, status="pending", executor=self.executor,
                              lease_until=time.time() + self.lease_s, started_at=now_dt())
        if not await self._db(self.repo.claim, step, expires_at=time.time() + row.ttl_s):
            return None
        key = (row.id, req.index)
        task = asyncio.create_task(self._execute(row, step), name=f"rollout-step-{row.id}-{req.index}")
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._tasks.pop(key, None))
        return task

    async def _ensure_running(self, row: RolloutRow) -> None:
        record = await self.sandboxes.get(row.tenant, row.sandbox_id)
        if record.state in _STARTING:
            record = await self.sandboxes.wait(row.tenant, row.sandbox_id, SandboxState.running, self.sandbox_wait_s)
        if record.state is SandboxState.paused:
            await self.data.resume(row.tenant, row.sandbox_id)
            log.info("rollout.resumed", rollout_id=row.id, sandbox_id=row.sandbox_id)
        elif record.state is not SandboxState.running:
            raise Conflict(f"sandbox {row.sandbox_id} of rollout {row.id} is {record.state.value}"
                           + (f" ({record.reason})" if record.reason else ""), loc=["path", "rollout_id"],
                           code="sandbox_not_running")
        if row.status == "paused":
            await self._db(self.repo.update, row.id, from_status=["paused"], status="active")

    async def _execute(self, row: RolloutRow, step: RolloutStepRow) -> RolloutStepRow:
        renewer = asyncio.create_task(self._renew(step))
        t0 = time.monotonic()
        observation: dict | None = None
        error: dict | None = None
        try:
            observation = await self._perform(row, step.action, step.args)
            status = "done"
        except CorralError as exc:
            status, error = "failed", {"status": exc.status_code, "code": exc.code, "message": exc.message}
        except Exception as exc:  # noqa: BLE001 - committed as the step's outcome
            log.exception("rollout.step_error", rollout_id=row.id, index=step.step_index)
            status, error = "failed", {"status": 500, "code": "internal", "message": f"{type(exc).__name__}: {exc}"}
        finally:
            renewer.cancel()
        duration = round((time.monotonic() - t0) * 1000, 2)
        finished_at = now_dt()
        if not await self._db(self.repo.complete, row.id, step.step_index, self.executor, status=status,
                              observation=observation, error=error, duration_ms=duration, finished_at=finished_at,
                              rollout_values=self._deadlines(row, idle=True)):
            # Our lease lapsed (the database was unreachable for that long): the row says
            # interrupted, and that is what every caller gets.
            log.error("rollout.step_lost_lease", rollout_id=row.id, index=step.step_index)
            lost = await self._db(self.repo.step, row.id, step.step_index)
            assert lost is not None
            return lost
        log.info("rollout.step", rollout_id=row.id, index=step.step_index, action=step.action, status=status,
                 ms=duration)
        return RolloutStepRow(**{**step.model_dump(), "status": status, "observation": observation, "error": error,
                                 "finished_at": finished_at, "duration_ms": duration})

    async def _renew(self, step: RolloutStepRow) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                await self._db(self.repo.renew, step.rollout_id, step.step_index, self.executor,
                               time.time() + self.lease_s)
            except Exception:  # noqa: BLE001 - the next renewal tries again
                log.exception("rollout.lease_renew_failed", rollout_id=step.rollout_id, index=step.step_index)

    async def _await_step(self, rollout_id: str, index: int) -> RolloutStepRow:
        """The step once it is no longer pending."""
        task = self._tasks.get((rollout_id, index))
        if task is not None:
            # Shielded: a caller that goes away must not cancel the execution.
            return await asyncio.shield(task)
        while True:
            step = await self._db(self.repo.step, rollout_id, index)
            assert step is not None
            if step.status != "pending":
                return step
            if step.lease_until < time.time():  # its executor died: never re-run it
                if await self._db(self.repo.interrupt_expired, time.time(), rollout_id):
                    log.warning("rollout.step_interrupted", rollout_id=rollout_id, index=index)
                continue
            await asyncio.sleep(0.2)

    async def _perform(self, row: RolloutRow, action: str, args: dict[str, Any]) -> dict[str, Any]:
        tenant, sid = row.tenant, row.sandbox_id
        if action in self.extra_actions:
            return await self.extra_actions[action].perform(row, args)
        if action == "exec":
            return (await self.data.exec(tenant, sid, ExecRequest.model_validate(args))).model_dump(mode="json")
        if action == "write_file":
            try:
                content = base64.b64decode(args["content"], validate=True) if args["encoding"] == "base64" \
                    else args["content"].encode()
            except ValueError:
                raise Unprocessable("content is not valid base64", loc=["body", "args", "content"]) from None
            if len(content) > self.max_write_bytes:
                raise PayloadTooLarge(f"content exceeds {self.max_write_bytes} bytes", loc=["body", "args", "content"])
            size = await self.data.write_file(tenant, sid, args["path"], content, args["mode"])
            return {"path": args["path"], "size": size}
        if action == "read_file":
            limit = args["max_bytes"]
            chunks = await self.data.open_file(tenant, sid, args["path"])
            buf, truncated = bytearray(), False
            try:
                async for chunk in chunks:
                    buf += chunk
                    if len(buf) > limit:
                        truncated = True
                        del buf[limit:]
                        break
            finally:
                await chunks.aclose()  # type: ignore[attr-defined]
            try:
                return {"path": args["path"], "size": len(buf), "truncated": truncated, "encoding": "utf-8",
                        "content": buf.decode()}
            except UnicodeDecodeError:
                return {"path": args["path"], "size": len(buf), "truncated": truncated, "encoding": "base64",
                        "content": base64.b64encode(buf).decode()}
        if action == "list_files":
            entries = await self.data.list_files(tenant, sid, args["path"])
            return {"path": args["path"], "entries": [e.model_dump(mode="json") for e in entries]}
        raise Unprocessable(f"unknown action {action!r}", loc=["body", "action"])

    # ---- idle pause, TTL, interrupted steps ---------------------------------------------

    async def sweep_once(self) -> None:
        now = time.time()
        if n := await self._db(self.repo.interrupt_expired, now):
            log.warning("rollout.steps_interrupted", count=n)
        for row in await self._db(self.repo.due_for_pause, now):
            await self._pause_idle(row)
        for row in await self._db(self.repo.due_for_expiry, now):
            await self._expire(row)

    async def _pause_idle(self, row: RolloutRow) -> None:
        async with self._locks[row.id]:
            fresh = await self._db(self.repo.get, row.id)
            if fresh is None or fresh.status != "active" or fresh.pause_at is None or fresh.pause_at >= time.time():
                return
            if await self._db(self.repo.has_pending, row.id):
                return
            state = await self._sandbox_state(fresh)
            try:
                if state is SandboxState.running:
                    await self.data.pause(fresh.tenant, fresh.sandbox_id)
            except CorralError as exc:
                log.warning("rollout.pause_failed", rollout_id=row.id, error=exc.message)
                await self._db(self.repo.update, row.id, from_status=["active"], pause_at=None)
                return
            if state in (SandboxState.running, SandboxState.paused):
                await self._db(self.repo.update, row.id, from_status=["active"], status="paused", pause_at=None)
                log.info("rollout.paused", rollout_id=row.id, sandbox_id=fresh.sandbox_id)
            else:  # ended or not started: nothing to pause
                await self._db(self.repo.update, row.id, from_status=["active"], pause_at=None)

    async def _expire(self, row: RolloutRow) -> None:
        async with self._locks[row.id]:
            fresh = await self._db(self.repo.get, row.id)
            if fresh is None or fresh.status not in ("active", "paused") or (fresh.expires_at or 0) >= time.time():
                return
            if await self._db(self.repo.has_pending, row.id):
                return
            await self._release(fresh, keep=not fresh.owns_sandbox)  # first, as in finish
            if await self._db(self.repo.update, row.id, from_status=["active", "paused"], status="expired",
                              pause_at=None, expires_at=None):
                log.info("rollout.expired", rollout_id=row.id, sandbox_id=fresh.sandbox_id)

    async def sweep_forever(self, interval_s: float) -> None:
        while True:
            try:
                await self.sweep_once()
            except Exception:  # noqa: BLE001 - keep sweeping
                log.exception("rollout.sweep_failed")
            await asyncio.sleep(interval_s)

    async def close(self, grace_s: float = 30.0) -> None:
        """Shutdown: let steps in flight commit; those still running after the grace become
        interrupted once their lease lapses."""
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)


def step_view(row: RolloutStepRow) -> Step:
    return Step(index=row.step_index, action=row.action, args=row.args, request_hash=row.request_hash,
                status=row.status, observation=row.observation,
                error=StepError.model_validate(row.error) if row.error else None, started_at=row.started_at,
                finished_at=row.finished_at, duration_ms=row.duration_ms, replays=row.replays or 0)
