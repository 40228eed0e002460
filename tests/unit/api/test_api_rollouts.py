"""Rollout step semantics without a platform: hashing, validation, exactly-once, interruption.

The service runs against a real SQLite log with fake sandbox/data-path objects.
"""

import asyncio
import time
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from corral_api.db.engine import make_engine, migrate
from corral_api.rollouts.repository import RolloutRepository
from corral_api.rollouts.schemas import RolloutCreate, RolloutFinish, StepRequest, normalize_args, request_hash
from corral_api.rollouts.service import RolloutService
from corral_common.contracts.exec import ExecResult
from corral_common.contracts.sandboxes import SandboxState
from corral_common.web.errors import Conflict, NotFound, Unprocessable
from tests.polling import until


def test_hash_is_over_normalized_args():
    short = normalize_args("exec", {"cmd": "echo hi"})
    explicit = normalize_args("exec", {"cmd": "echo hi", "timeout_s": 60, "user": "user", "env": {}})
    assert request_hash("exec", short) == request_hash("exec", explicit)
    assert request_hash("exec", short) != request_hash("exec", normalize_args("exec", {"cmd": "echo ho"}))
    assert request_hash("exec", short) != request_hash("read_file", normalize_args("read_file", {"path": "echo hi"}))
    assert len(request_hash("exec", short)) == 64


def test_a_step_logged_before_output_encoding_existed_keeps_its_hash():
    # sha256 of {"action":"exec","args":{cmd, cwd, env, output_limit, stdin, timeout_s, user}} as logged before
    assert request_hash("exec", normalize_args("exec", {"cmd": "echo hi"})) == \
        request_hash("exec", {"cmd": "echo hi", "cwd": None, "env": {}, "output_limit": 1048576, "stdin": None,
                              "timeout_s": 60.0, "user": "user"})
    assert normalize_args("exec", {"cmd": "x", "output_encoding": "utf-8"}) == normalize_args("exec", {"cmd": "x"})
    raw = normalize_args("exec", {"cmd": "x", "output_encoding": "base64"})
    assert raw["output_encoding"] == "base64"
    assert request_hash("exec", raw) != request_hash("exec", normalize_args("exec", {"cmd": "x"}))


@pytest.mark.parametrize("action,args", [("exec", {}), ("exec", {"cmd": "x", "bogus": 1}),
                                         ("write_file", {"path": ""}), ("read_file", {"path": "a", "max_bytes": 0}),
                                         ("write_file", {"path": "a", "encoding": "rot13"}),
                                         ("exec", {"cmd": "x", "output_encoding": "latin-1"})])
def test_bad_step_args_are_422(action, args):
    with pytest.raises(Unprocessable) as err:
        normalize_args(action, args)
    assert err.value.loc[:2] == ["body", "args"]


def test_request_models():
    with pytest.raises(ValidationError):
        StepRequest(index=-1, action="exec", args={})
    with pytest.raises(ValidationError):
        StepRequest(index=0, action="delete_everything", args={})
    with pytest.raises(ValidationError):
        RolloutCreate(job_id="j")  # neither sandbox nor sandbox_id
    with pytest.raises(ValidationError):
        RolloutCreate(job_id="j", sandbox_id="sb-1", sandbox={"environment": "busybox"})
    assert RolloutCreate(job_id="j", sandbox={"environment": "busybox"}).sandbox.memory_mb == 256


class FakeSandboxes:
    def __init__(self):
        self.state = SandboxState.running

    async def get(self, tenant, sandbox_id):
        if tenant != "t":
            raise NotFound("no")
        return SimpleNamespace(id=sandbox_id, state=self.state, reason=None)

    async def create(self, tenant, spec):
        return await self.get(tenant, "sb-1")

    async def wait(self, tenant, sandbox_id, target, timeout_s):
        return await self.get(tenant, sandbox_id)

    async def delete(self, tenant, sandbox_id):
        self.state = SandboxState.terminated


class FakeData:
    def __init__(self, sandboxes):
        self.sandboxes = sandboxes
        self.calls = 0
        self.gate = asyncio.Event()

    async def exec(self, tenant, sandbox_id, body):
        self.calls += 1
        await self.gate.wait()
        return ExecResult(exit_code=0, stdout=f"ran {self.calls}\n", stderr="", duration_ms=1.0)

    async def pause(self, tenant, sandbox_id):
        self.sandboxes.state = SandboxState.paused

    async def resume(self, tenant, sandbox_id):
        self.sandboxes.state = SandboxState.running


@pytest.fixture
def service(tmp_path):
    url = f"sqlite:///{tmp_path}/api.db"
    migrate(url)
    engine = make_engine(url)
    sandboxes = FakeSandboxes()
    svc = RolloutService(RolloutRepository(engine), sandboxes, FakeData(sandboxes), idle_pause_s=0.2, ttl_s=3600,
                         lease_s=0.3)
    yield svc
    engine.dispose()


async def _rollout(service):
    return await service.create("t", RolloutCreate(job_id="j", sandbox={"environment": "busybox"}), wait=True,
                                timeout_s=1)


async def test_concurrent_and_abandoned_requests_execute_once(service):
    rollout = await _rollout(service)
    step0 = StepRequest(index=0, action="exec", args={"cmd": "echo hi >> f"})
    first = asyncio.create_task(service.step("t", rollout.id, step0))
    await until(lambda: service.data.calls == 1, timeout_s=10, what="the step to execute")
    first.cancel()  # the caller dies mid-step: the execution goes on server-side
    second = asyncio.create_task(service.step("t", rollout.id, step0))
    third = asyncio.create_task(service.step("t", rollout.id, step0))
    with pytest.raises(Conflict) as busy:  # the next index waits for the one executing
        await service.step("t", rollout.id, StepRequest(index=1, action="exec", args={"cmd": "true"}))
    assert busy.value.code == "step_in_progress"
    service.data.gate.set()
    answers = await asyncio.gather(second, third)
    assert service.data.calls == 1
    assert {a.observation["stdout"] for a in answers} == {"ran 1\n"} and all(a.replayed for a in answers)
    replay = await service.step("t", rollout.id, step0)
    assert replay.replayed and replay.status == "done" and service.data.calls == 1
    assert sorted(a.replays for a in answers) == [1, 2] and replay.replays == 3  # every re-send is counted
    assert (await service.get("t", rollout.id)).steps[0].replays == 3
    with pytest.raises(Conflict):
        await service.step("t", rollout.id, StepRequest(index=0, action="exec", args={"cmd": "echo other"}))
    with pytest.raises(Unprocessable):
        await service.step("t", rollout.id, StepRequest(index=5, action="exec", args={"cmd": "true"}))
    with pytest.raises(NotFound):
        await service.step("other", rollout.id, step0)
    trajectory = await service.get("t", rollout.id)
    assert [(s.index, s.status) for s in trajectory.steps] == [(0, "done")] and trajectory.step_count == 1


async def test_step_of_a_dead_api_is_interrupted_not_rerun(service):
    rollout = await _rollout(service)
    step0 = StepRequest(index=0, action="exec", args={"cmd": "echo hi >> f"})
    task = asyncio.create_task(service.step("t", rollout.id, step0))
    # In flight (its lease taken, the exec called) before the process "dies"; a fixed sleep
    # here let a loaded machine kill it before it started, and the retry then waited forever.
    await until(lambda: service.data.calls == 1, timeout_s=10, what="the step to execute")
    # Simulate the api process dying: its execution task stops and stops renewing the lease;
    # a new process (new executor id, no in-memory task) answers the retry.
    for running in list(service._tasks.values()):
        running.cancel()
    task.cancel()
    service._tasks.clear()
    service.executor = "api-restarted"
    t0 = time.monotonic()
    answer = await service.step("t", rollout.id, step0)
    assert answer.status == "interrupted" and answer.error.code == "step_interrupted"
    assert service.data.calls == 1 and time.monotonic() - t0 < 2
    service.data.gate.set()
    nxt = await service.step("t", rollout.id, StepRequest(index=1, action="exec", args={"cmd": "true"}))
    assert nxt.status == "done" and service.data.calls == 2


async def test_idle_pause_resume_and_finish(service):
    rollout = await _rollout(service)
    service.data.gate.set()
    await service.step("t", rollout.id, StepRequest(index=0, action="exec", args={"cmd": "true"}))
    async def paused_by_sweep():
        await service.sweep_once()  # pauses a rollout idle for idle_pause_s (0.2 s)
        return (await service.get("t", rollout.id)).status == "paused"
    await until(paused_by_sweep, timeout_s=10, what="the idle rollout to be paused")
    assert service.sandboxes.state is SandboxState.paused
    await service.step("t", rollout.id, StepRequest(index=1, action="exec", args={"cmd": "true"}))
    assert (await service.get("t", rollout.id)).status == "active"
    assert service.sandboxes.state is SandboxState.running
    done = await service.finish("t", rollout.id, RolloutFinish(reward=1.0))
    assert done.status == "finished" and done.reward == 1.0
    assert service.sandboxes.state is SandboxState.terminated
