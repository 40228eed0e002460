"""End to end through the SDK only: spread, exec, files, limits, cleanliness, auth, bad input."""

import asyncio

import httpx
import pytest

from corral import AsyncCorral, Corral, CorralError
from tests.e2e.conftest import OTHER_TENANT_KEY, leftovers


def test_twenty_sandboxes_spread_exec_files_and_leave_nothing(platform):
    async def scenario():
        async with AsyncCorral(platform["api"], platform["api_key"]) as corral:
            sandboxes = await corral.sandboxes.create_many("busybox", 20, concurrency=10, memory_mb=64,
                                                           labels={"suite": "e2e-20"})
            assert {sb.state for sb in sandboxes} == {"running"}
            nodes = {sb.info.node_id for sb in sandboxes}
            assert nodes == {"node-1", "node-2"}

            async def check(sb):
                result = await sb.exec(["sh", "-c", "hostname; id -u; echo $HOME"])
                assert result.exit_code == 0
                assert result.stdout.split() == [sb.id, "1000", "/home/user"]
                await sb.write_file(f"work/{sb.id}.txt", sb.id * 3)
                assert await sb.read_file(f"/home/user/work/{sb.id}.txt") == (sb.id * 3).encode()
                assert [f.name for f in await sb.list_files("work")] == [f"{sb.id}.txt"]

            await asyncio.gather(*(check(sb) for sb in sandboxes))
            listed = await corral.sandboxes.list(labels={"suite": "e2e-20"})
            assert {sb.id for sb in listed} == {sb.id for sb in sandboxes}
            await asyncio.gather(*(sb.delete(wait=True) for sb in sandboxes))
            return sandboxes

    sandboxes = asyncio.run(scenario())
    for sb in sandboxes:
        assert sb.state == "terminated"
        assert leftovers(platform, sb.info.node_id, sb) == []
    with Corral(platform["api"], platform["api_key"]) as corral:
        ended = corral.sandboxes.get(sandboxes[0].id)
        assert ended.state == "terminated" and ended.info.usage.wall_time_s > 0


def test_exec_env_cwd_stdin_and_streaming(corral):
    with corral.sandboxes.create("busybox", memory_mb=64, env={"GREETING": "hi"}) as sb:
        result = sb.exec("echo $GREETING $EXTRA; pwd; cat", env={"EXTRA": "there"}, cwd="/tmp", stdin="piped")
        assert result.stdout == "hi there\n/tmp\npiped"
        assert sb.exec(["sh", "-c", "exit 7"]).exit_code == 7
        chunks = list(sb.exec_stream("for i in 1 2 3; do echo $i; done; echo err >&2"))
        assert "".join(c.data for c in chunks if c.type == "stdout") == "1\n2\n3\n"
        assert chunks[-1].type == "exit" and chunks[-1].result.exit_code == 0
        slow = sb.exec("sleep 30", timeout_s=1)
        assert slow.timed_out and slow.duration_ms < 10_000


def test_output_is_capped(corral):
    with corral.sandboxes.create("busybox", memory_mb=64) as sb:
        result = sb.exec("yes", timeout_s=30, output_limit=65536)
        assert result.truncated and not result.timed_out
        assert len(result.stdout) == 65536
        assert sb.exec("echo still fine").stdout == "still fine\n"


def test_output_that_is_not_utf8_comes_back_intact(corral):
    blob = bytes(range(256)) * 400  # every byte value, 100 KiB: several chunks when streamed
    mixed = "printf '\\377\\376abc\\n'; printf '\\303' >&2"  # not UTF-8; stderr ends mid-character
    with corral.sandboxes.create("busybox", memory_mb=64) as sb:
        text = sb.exec(mixed)  # the default: text, invalid bytes replaced (as always)
        assert (text.encoding, text.stdout, text.stderr) == ("utf-8", "\ufffd\ufffdabc\n", "\ufffd")
        raw = sb.exec(mixed, output_encoding="base64")
        assert (raw.encoding, raw.stdout_bytes, raw.stderr_bytes) == ("base64", b"\xff\xfeabc\n", b"\xc3")
        sb.write_file("blob.bin", blob)
        assert sb.exec(["cat", "blob.bin"], output_encoding="base64").stdout_bytes == blob
        chunks = list(sb.exec_stream("cat blob.bin; printf '\\377' >&2", output_encoding="base64"))
        assert {c.encoding for c in chunks[:-1]} == {"base64"}
        assert b"".join(c.data_bytes for c in chunks if c.type == "stdout") == blob
        assert [c.data_bytes for c in chunks if c.type == "stderr"] == [b"\xff"]
        assert chunks[-1].type == "exit" and chunks[-1].result.stdout_bytes == blob
        rollout = corral.rollouts.create(job_id="bytes", sandbox_id=sb.id)
        step = rollout.exec(mixed, output_encoding="base64")
        assert (step.stdout_bytes, step.stderr_bytes) == (b"\xff\xfeabc\n", b"\xc3")
        rollout.finish(keep_sandbox=True)


def test_memory_limit_oom_kill_is_reported(corral):
    with corral.sandboxes.create("busybox", memory_mb=32) as sb:
        result = sb.exec("head -c 200m /dev/zero | tail > /dev/null", timeout_s=60)
        assert result.oom_killed and result.exit_code != 0
        assert sb.exec("echo alive").stdout == "alive\n"


def test_fork_bomb_is_stopped_by_pids_limit(corral):
    with corral.sandboxes.create("busybox", memory_mb=128, pids_limit=64) as bomb, \
            corral.sandboxes.create("busybox", memory_mb=64) as neighbour:
        result = bomb.exec("b() { b | b & }; b; sleep 2; ps | wc -l", timeout_s=20)
        assert result.exit_code is not None or result.timed_out
        # The neighbour and the node are unharmed.
        assert neighbour.exec("echo ok").stdout == "ok\n"
        count = int(bomb.exec("ls /proc | grep -c '^[0-9]'", timeout_s=10).stdout.strip() or 0)
        assert count <= 64


def test_timeout_s_ends_the_sandbox(corral):
    sb = corral.sandboxes.create("busybox", memory_mb=64, timeout_s=2)
    sb.wait("terminated", timeout=30)
    assert sb.state == "terminated" and sb.info.reason == "timeout"


def test_disk_mb_caps_the_writable_layer(corral):
    with corral.sandboxes.create("busybox", memory_mb=64, disk_mb=16) as sb:
        result = sb.exec("dd if=/dev/zero of=/home/user/big bs=1M count=64", timeout_s=30)
        assert result.exit_code != 0 and "No space left" in result.stderr


def test_auth_and_tenant_isolation(platform, corral):
    anonymous = httpx.get(f"{platform['api']}/v1/sandboxes")
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthorized"
    bad_key = httpx.get(f"{platform['api']}/v1/sandboxes", headers={"authorization": "Bearer nope"})
    assert bad_key.status_code == 401
    with corral.sandboxes.create("busybox", memory_mb=64) as sb:
        with Corral(platform["api"], OTHER_TENANT_KEY) as other:
            with pytest.raises(CorralError) as info:
                other.sandboxes.get(sb.id)
            assert info.value.status == 404
            assert sb.id not in {s.id for s in other.sandboxes.list()}
            with pytest.raises(CorralError) as info:
                Corral(platform["api"], OTHER_TENANT_KEY).sandboxes.get(sb.id).exec("id")
            assert info.value.status == 404


@pytest.mark.parametrize("body,field", [
    ({"environment": "no-such-env"}, "environment"),
    ({"environment": "busybox", "memory_mb": 0}, "memory_mb"),
    ({"environment": "busybox", "timeout_s": -5}, "timeout_s"),
    ({"environment": "busybox", "network": "host"}, "network"),
    ({"environment": "busybox", "requests": {"cpu": 2}}, "requests"),  # above its limit (cpu 1)
    ({"environment": "busybox", "memory_mb": 64, "requests": {"memory_mb": 128}}, "requests"),
    ({"environment": "busybox", "requests": {"gpu": 1}}, "requests"),
])
def test_bad_create_requests_are_4xx_and_create_nothing(platform, body, field):
    headers = {"authorization": f"Bearer {platform['api_key']}"}
    before = httpx.get(f"{platform['api']}/v1/sandboxes", headers=headers).json()["items"]
    response = httpx.post(f"{platform['api']}/v1/sandboxes", json=body, headers=headers)
    assert response.status_code == 422
    error = response.json()["error"]
    assert any(field in d["loc"] for d in error["details"]), error
    after = httpx.get(f"{platform['api']}/v1/sandboxes", headers=headers).json()["items"]
    assert len(after) == len(before)


def test_requests_and_limits_are_both_recorded_and_placement_counts_the_requests(platform, corral):
    """Forty default sandboxes at once on two nodes of one core (x16) each: by their limits (a
    core each) 32 would fit; by their requests (an idle sandbox's use) all of them do."""
    from corral_common.contracts.sandboxes import CONTAINER_REQUESTS

    async def scenario():
        async with AsyncCorral(platform["api"], platform["api_key"]) as aio:
            sandboxes = await aio.sandboxes.create_many("busybox", 40, concurrency=8)
            try:
                assert all(sb.state == "running" for sb in sandboxes)
                info = (await aio.sandboxes.get(sandboxes[0].id)).info.to_dict()
                assert (info["cpu"], info["memory_mb"], info["disk_mb"], info["pids_limit"]) == (1.0, 256, 1024, 512)
                assert info["requests"] == CONTAINER_REQUESTS
            finally:
                await asyncio.gather(*(sb.delete(wait=True) for sb in sandboxes))

    asyncio.run(scenario())
    with corral.sandboxes.create("busybox", memory_mb=64, requests={"cpu": 0.25, "memory_mb": 32}) as sb:
        assert sb.info.to_dict()["requests"] == {**CONTAINER_REQUESTS, "cpu": 0.25, "memory_mb": 32}


def test_bad_file_requests(platform, corral):
    with corral.sandboxes.create("busybox", memory_mb=64) as sb:
        for path in ("../../etc/shadow", "/home/user/../../../etc/passwd"):
            with pytest.raises(CorralError) as info:
                sb.read_file(path)
            assert info.value.status == 400
        sb.exec("ln -s /etc /home/user/escape")
        with pytest.raises(CorralError) as info:
            sb.write_file("escape/evil", "x")
        assert info.value.status == 400
        with pytest.raises(CorralError) as info:
            sb.write_file("big.bin", b"x" * (2 * 1024 * 1024))  # the api caps uploads at 1 MiB here
        assert info.value.status == 413
        assert sb.exec("ls /home/user").stdout.split() == ["escape"]
        with pytest.raises(CorralError) as info:
            sb.read_file("missing.txt")
        assert info.value.status == 404


def test_issue_34_timeouts_delete_by_id_pause_and_text_files(corral):
    """What a new user hit (issue 34): a streamed exec that runs out of ``timeout_s`` ends with
    its result (it raised KeyError 'exit_code'), shaped as ``exec``'s; ``sandboxes.delete(id)``
    (it crashed on a str); ``pause()`` answers the record as it is after the pause;
    ``read_file`` is bytes and ``read_text`` text."""
    with corral.sandboxes.create("busybox", memory_mb=64, labels={"suite": "issue-34"}) as sb:
        *output, last = list(sb.exec_stream("echo started; sleep 5; echo never", timeout_s=1))
        assert b"".join(c.data_bytes or b"" for c in output) == b"started\n"
        assert last.type == "exit" and (last.result.exit_code, last.result.timed_out) == (None, True)
        plain = sb.exec("sleep 5", timeout_s=1)
        assert (plain.exit_code, plain.timed_out) == (last.result.exit_code, last.result.timed_out)

        sb.write_file("notes.txt", "héllo\n")
        assert sb.read_file("notes.txt") == "héllo\n".encode() and sb.read_text("notes.txt") == "héllo\n"

        paused = sb.pause()
        assert paused.state == "paused" and corral.sandboxes.get(sb.id).state == "paused"
        assert sb.resume().state == "running"

        other = corral.sandboxes.create("busybox", memory_mb=64, labels={"suite": "issue-34"})
        gone = corral.sandboxes.delete(other.id)  # by id; waits until it stopped, as Sandbox.delete
        assert (gone.id, gone.state) == (other.id, "terminated")
        third = corral.sandboxes.create("busybox", memory_mb=64, labels={"suite": "issue-34"})
        assert corral.sandboxes.delete(third, wait=False) is third
        assert corral.sandboxes.get(third.id).wait("terminated", timeout=60).state == "terminated"
