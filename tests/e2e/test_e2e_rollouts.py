"""Rollouts end to end: exactly-once steps across trainer SIGKILLs, replay, bad input, idle pause, TTL."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from corral import AsyncCorral, CorralError, StepFailed, StepInterrupted
from tests.e2e.conftest import OTHER_TENANT_KEY, runtime_id
from tests.polling import until_sync

TRAINER = Path(__file__).with_name("rollout_trainer.py")


def trainer(platform, rollout_id: str, steps: int, slow: int, block_after: int = -1) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(TRAINER), platform["api"], platform["api_key"], rollout_id,
                             str(steps), str(slow), str(block_after)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=str(Path(__file__).parents[2]))


def lines(corral, sandbox_id: str) -> list[str]:
    try:
        return corral.sandboxes.get(sandbox_id).read_file("log.txt").decode().splitlines()
    except CorralError:
        return []


def test_trainer_sigkilled_between_and_mid_step_resumes_exactly_once(corral, platform):
    steps, slow = 6, 3
    rollout = corral.rollouts.create("busybox", job_id="preempt", metadata={"episode": 1}, memory_mb=64)

    # Trainer A does steps 0 and 1, then is killed between steps.
    a = trainer(platform, rollout.id, steps, slow, block_after=1)
    for _ in range(3):  # "attached", step 0, step 1
        json.loads(a.stdout.readline())
    a.send_signal(signal.SIGKILL)
    a.wait()
    assert lines(corral, rollout.sandbox_id) == ["step-0", "step-1"]

    # Trainer B fast-forwards 0-1, runs 2, and is killed while step 3 is executing (its line
    # is written, its sleep is running, its result is not committed).
    b = trainer(platform, rollout.id, steps, slow)
    until_sync(lambda: [s.status for s in rollout.trajectory()] == ["done"] * 3 + ["pending"]
               and len(lines(corral, rollout.sandbox_id)) == 4, timeout_s=20, what="step 3 executing")
    b.send_signal(signal.SIGKILL)
    b.wait()
    assert [s.status for s in rollout.trajectory()][3] == "pending"  # still running server-side

    # Trainer C re-runs the same loop: 0-2 from the log, 3 waits for the execution B started,
    # 4-5 run live.
    c = trainer(platform, rollout.id, steps, slow)
    out, _ = c.communicate(timeout=60)
    summary = json.loads(out.strip().splitlines()[-1])
    assert c.returncode == 0 and summary == {"done": steps, "replayed": 4}

    assert lines(corral, rollout.sandbox_id) == [f"step-{i}" for i in range(steps)]  # one line per step
    trajectory = rollout.trajectory()
    assert [(s.index, s.status, s.observation["exit_code"]) for s in trajectory] == [(i, "done", 0) for i in range(steps)]
    assert trajectory[slow].duration_ms >= 3000 and trajectory[slow].finished_at > trajectory[slow].started_at
    assert rollout.finish(reward=1.0, info={"solved": True}).status == "finished"
    sandbox = corral.sandboxes.get(rollout.sandbox_id).wait("terminated", timeout=30)
    assert sandbox.state == "terminated"  # the rollout made it, so finish released it


def test_replay_divergence_files_and_bad_input(corral, platform):
    rollout = corral.rollouts.create("busybox", job_id="replay", memory_mb=64)
    rollout.exec("echo once >> count.txt")
    rollout.write_file("data/notes.txt", "hello")
    assert rollout.read_file("data/notes.txt") == b"hello"
    assert [f.name for f in rollout.list_files("data")] == ["notes.txt"]
    rollout.write_file("blob.bin", b"\xff\x00\xfe")
    with pytest.raises(StepFailed) as missing:
        rollout.read_file("nope.txt")  # a failed action is committed as the step's outcome
    assert missing.value.status == 404 and rollout.cursor == 6

    # A second process re-running the loop gets every answer from the log.
    again = corral.rollouts.attach(rollout.id)
    assert (again.cursor, again.committed) == (0, 6)
    again.exec("echo once >> count.txt")
    again.write_file("data/notes.txt", "hello")
    assert again.read_file("data/notes.txt") == b"hello"
    again.list_files("data")
    again.write_file("blob.bin", b"\xff\x00\xfe")
    with pytest.raises(StepFailed):
        again.read_file("nope.txt")
    assert again.replayed == 6
    assert again.read_file("blob.bin") == b"\xff\x00\xfe"  # index 6: live

    async def async_replay():
        async with AsyncCorral(platform["api"], platform["api_key"]) as client:
            resumed = await client.rollouts.attach(rollout.id)
            assert (await resumed.exec("echo once >> count.txt")).exit_code == 0
            await resumed.write_file("data/notes.txt", "hello")
            assert resumed.replayed == 2 and len(await resumed.trajectory()) == 7

    asyncio.run(async_replay())
    sandbox = corral.sandboxes.get(rollout.sandbox_id)
    assert sandbox.read_file("count.txt") == b"once\n"

    http = corral.http
    url = f"/v1/rollouts/{rollout.id}/steps"

    def post(body, client=http):
        return client.post(url, json=body)

    diverged = post({"index": 0, "action": "exec", "args": {"cmd": "echo twice >> count.txt"}})
    assert diverged.status_code == 409 and diverged.json()["error"]["code"] == "step_mismatch"
    skipped = post({"index": 99, "action": "exec", "args": {"cmd": "true"}})
    assert skipped.status_code == 422 and skipped.json()["error"]["code"] == "step_skipped"
    negative = post({"index": -1, "action": "exec", "args": {"cmd": "true"}})
    assert negative.status_code == 422 and negative.json()["error"]["details"][0]["loc"] == ["body", "index"]
    assert post({"index": 7, "action": "rm_rf", "args": {}}).status_code == 422
    bad_args = post({"index": 7, "action": "exec", "args": {"cmd": "true", "bogus": 1}})
    assert bad_args.status_code == 422 and "bogus" in bad_args.json()["error"]["message"]
    unknown = http.post("/v1/rollouts/ro-unknown/steps", json={"index": 0, "action": "exec", "args": {"cmd": "true"}})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    assert http.get("/v1/rollouts/ro-unknown").status_code == 404
    both = http.post("/v1/rollouts", json={"job_id": "x", "sandbox_id": "sb-1", "sandbox": {"environment": "busybox"}})
    assert both.status_code == 422
    with httpx.Client(base_url=platform["api"], headers={"authorization": f"Bearer {OTHER_TENANT_KEY}"}) as other:
        assert other.get(f"/v1/rollouts/{rollout.id}").status_code == 404
        assert post({"index": 0, "action": "exec", "args": {"cmd": "echo once >> count.txt"}}, other).status_code == 404
        assert other.get("/v1/rollouts", params={"job_id": "replay"}).json()["items"] == []
    assert [r.id for r in corral.rollouts.list(job_id="replay")] == [rollout.id]

    # Finished: committed steps still replay, new ones are refused; the given sandbox is kept.
    bound = corral.rollouts.create(job_id="replay", sandbox_id=sandbox.id)
    bound.exec("true")
    bound.finish(reward=0.5)
    assert bound.finish(reward=0.5).info.reward == 0.5  # a retried finish is fine
    assert corral.rollouts.attach(bound.id).exec("true").exit_code == 0
    late = http.post(f"/v1/rollouts/{bound.id}/steps", json={"index": 1, "action": "exec", "args": {"cmd": "true"}})
    assert late.status_code == 409 and late.json()["error"]["code"] == "rollout_finished"
    assert corral.sandboxes.get(sandbox.id).state == "running"
    rollout.finish(reward=0.0)


def _freezer_state(platform, sandbox) -> str:
    path = Path(f"/sys/fs/cgroup/freezer/corral/{sandbox.info.node_id}/{runtime_id(sandbox)}/freezer.state")
    return path.read_text().strip() if path.exists() else ""


def test_idle_rollout_is_paused_resumed_on_next_step_and_expires(corral, platform):
    rollout = corral.rollouts.create("busybox", job_id="idle", memory_mb=64, idle_pause_s=1, ttl_s=60)
    rollout.exec("echo before > state.txt")
    until_sync(lambda: rollout.refresh().status == "paused", timeout_s=20, what="idle pause")
    sandbox = corral.sandboxes.get(rollout.sandbox_id)
    assert sandbox.state == "paused" and _freezer_state(platform, sandbox) == "FROZEN"
    with pytest.raises(CorralError) as frozen:
        sandbox.exec("true")
    assert frozen.value.status == 409
    t0 = time.monotonic()
    assert rollout.exec("cat state.txt").stdout == "before\n"  # resumed transparently
    resume_ms = (time.monotonic() - t0) * 1000
    assert rollout.refresh().status == "active" and sandbox.refresh().state == "running"
    assert _freezer_state(platform, sandbox) == "THAWED"
    print(f"resume-on-step latency: {resume_ms:.0f} ms")

    # The public pause/resume endpoints.
    assert sandbox.pause().state == "paused"
    assert sandbox.resume().state == "running"
    assert sandbox.exec("cat state.txt").stdout == "before\n"

    # TTL: an idle rollout is expired and its sandbox released; the log stays.
    short = corral.rollouts.create("busybox", job_id="idle", memory_mb=64, idle_pause_s=0.5, ttl_s=2)
    short.exec("true")
    until_sync(lambda: short.refresh().status == "expired", timeout_s=30, what="TTL expiry")
    assert corral.sandboxes.get(short.sandbox_id).wait("terminated", timeout=30).state == "terminated"
    assert [s.status for s in short.trajectory()] == ["done"]
    rollout.finish()


def _restart_api(platform) -> None:
    """SIGKILL the platform's api and start it again with the same environment (same DB)."""
    run = platform["state"] / "run"
    old = int((run / "api.pid").read_text())
    environ = dict(item.split("=", 1) for item in Path(f"/proc/{old}/environ").read_text().split("\0") if "=" in item)
    os.kill(old, signal.SIGKILL)
    until_sync(lambda: not Path(f"/proc/{old}").exists() or "Z" in Path(f"/proc/{old}/stat").read_text().split()[2],
               timeout_s=20, what="api gone")
    log = open(platform["state"] / "logs" / "api.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen([sys.executable, "-m", "corral_api"], env=environ, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, cwd=platform["state"])
    (run / "api.pid").write_text(str(proc.pid))  # `down` stops this one

    def healthy() -> bool:
        try:
            return httpx.get(f"{platform['api']}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    until_sync(healthy, timeout_s=30, what="api back")


def test_step_running_when_the_api_dies_is_interrupted_not_rerun(corral, platform):
    rollout = corral.rollouts.create("busybox", job_id="api-crash", memory_mb=64)
    rollout.exec("echo zero >> log.txt")
    slow = {"index": 1, "action": "exec", "args": {"cmd": "echo one >> log.txt; sleep 2"}}
    with httpx.Client(base_url=platform["api"], headers={"authorization": f"Bearer {platform['api_key']}"}) as http:
        with pytest.raises(httpx.TimeoutException):
            http.post(f"/v1/rollouts/{rollout.id}/steps", json=slow, timeout=0.5)  # the trainer gives up
        until_sync(lambda: len(lines(corral, rollout.sandbox_id)) == 2, timeout_s=20, what="step 1 running")
        _restart_api(platform)
        answer = http.post(f"/v1/rollouts/{rollout.id}/steps", json=slow, timeout=30).json()
    # The new api cannot know whether the command took effect: interrupted, not run again.
    assert answer["status"] == "interrupted" and answer["error"]["code"] == "step_interrupted"
    replay = corral.rollouts.attach(rollout.id)
    replay.exec("echo zero >> log.txt")  # index 0: from the log
    with pytest.raises(StepInterrupted):
        replay.exec("echo one >> log.txt; sleep 2")  # index 1: reported again, never re-run
    assert replay.cursor == 2
    replay.exec("echo two >> log.txt")
    until_sync(lambda: lines(corral, rollout.sandbox_id) == ["zero", "one", "two"], timeout_s=10, what="log")
    assert [s.status for s in rollout.trajectory()] == ["done", "interrupted", "done"]
    rollout.finish(reward=0.0)
