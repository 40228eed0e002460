"""SWE-ReX's unchanged RemoteRuntime (swe-rex from PyPI, pinned in requirements-dev.txt) against
/v1/sandboxes/{id}/swerex on the live platform: sessions, errors the client re-raises,
timeout + interrupt, files, upload, idempotent retries, bad input, close."""

import asyncio
import uuid

import httpx
import pytest

swerex = pytest.importorskip("swerex", reason="swe-rex (requirements-dev.txt) is not installed")

from swerex.exceptions import (  # noqa: E402
    BashIncorrectSyntaxError,
    CommandTimeoutError,
    NonZeroExitCodeError,
    SessionDoesNotExistError,
    SessionExistsError,
)
from swerex.runtime.abstract import (  # noqa: E402
    BashAction,
    BashInterruptAction,
    CloseBashSessionRequest,
    Command,
    CreateBashSessionRequest,
    ReadFileRequest,
    UploadRequest,
    WriteFileRequest,
)
from swerex.runtime.remote import RemoteRuntime  # noqa: E402

from corral import CorralError  # noqa: E402
from tests.e2e.conftest import OTHER_TENANT_KEY  # noqa: E402
from tests.polling import until_sync  # noqa: E402


def token_for(platform, sandbox_id: str, key: str | None = None) -> dict:
    response = httpx.post(f"{platform['api']}/v1/sandboxes/{sandbox_id}/swerex-token",
                          headers={"Authorization": f"Bearer {key or platform['api_key']}"}, timeout=30)
    assert response.status_code == 201, response.text
    return response.json()


async def session_scenario(rt: RemoteRuntime, tmp_path) -> None:
    assert (await rt.is_alive(timeout=5)).is_alive
    await rt.create_session(CreateBashSessionRequest())
    with pytest.raises(SessionExistsError):
        await rt.create_session(CreateBashSessionRequest())

    obs = await rt.run_in_session(BashAction(command="echo hello", timeout=20))
    assert (obs.output, obs.exit_code) == ("hello\n", 0)
    # The shell persists: cwd, variables and functions carry over between commands.
    await rt.run_in_session(BashAction(command="cd /tmp && export SWX=42 && greet() { echo hi $1; }", timeout=20))
    obs = await rt.run_in_session(BashAction(command="pwd; echo $SWX; greet you", timeout=20))
    assert obs.output.split() == ["/tmp", "42", "hi", "you"]

    with pytest.raises(NonZeroExitCodeError, match="exit code 3"):
        await rt.run_in_session(BashAction(command="echo partial; (exit 3)", timeout=20, check="raise"))
    obs = await rt.run_in_session(BashAction(command="false", timeout=20, check="silent"))
    assert obs.exit_code == 1
    with pytest.raises(BashIncorrectSyntaxError) as syntax:
        await rt.run_in_session(BashAction(command="echo 'unterminated", timeout=20))
    assert syntax.value.extra_info["bash_stderr"]

    # A command past its timeout raises; it still runs until interrupted; the shell survives.
    with pytest.raises(CommandTimeoutError):
        await rt.run_in_session(BashAction(command="sleep 60; echo late", timeout=1))
    await rt.run_in_session(BashInterruptAction(timeout=2))
    obs = await rt.run_in_session(BashAction(command="echo back $SWX", timeout=20))
    assert obs.output.strip() == "back 42"

    # A second, independent session.
    await rt.create_session(CreateBashSessionRequest(session="other"))
    obs = await rt.run_in_session(BashAction(command="echo ${SWX:-unset}", session="other", timeout=20))
    assert obs.output.strip() == "unset"
    await rt.close_session(CloseBashSessionRequest(session="other"))
    with pytest.raises(SessionDoesNotExistError):
        await rt.run_in_session(BashAction(command="true", session="other", timeout=20))

    # execute: subprocess.run semantics.
    out = await rt.execute(Command(command="echo out; echo err >&2; exit 3", shell=True, timeout=20))  # noqa: S604 - runs in the sandbox
    assert (out.stdout, out.stderr, out.exit_code) == ("out\n", "err\n", 3)
    with pytest.raises(NonZeroExitCodeError):
        await rt.execute(Command(command=["false"], check=True, timeout=20))
    with pytest.raises(CommandTimeoutError):
        await rt.execute(Command(command=["sleep", "30"], timeout=1))

    # Files: write (parents made), read, missing → FileNotFoundError; upload a file and a directory.
    await rt.write_file(WriteFileRequest(path="/work/deep/notes.txt", content="héllo\n"))
    assert (await rt.read_file(ReadFileRequest(path="/work/deep/notes.txt"))).content == "héllo\n"
    with pytest.raises(FileNotFoundError):
        await rt.read_file(ReadFileRequest(path="/work/nope.txt"))
    (tmp_path / "single.txt").write_text("one file")
    (tmp_path / "repo" / "pkg").mkdir(parents=True)
    (tmp_path / "repo" / "README").write_text("readme")
    (tmp_path / "repo" / "pkg" / "mod.py").write_text("X = 1\n")
    await rt.upload(UploadRequest(source_path=str(tmp_path / "single.txt"), target_path="/work/up/single.txt"))
    await rt.upload(UploadRequest(source_path=str(tmp_path / "repo"), target_path="/work/repo"))
    assert (await rt.read_file(ReadFileRequest(path="/work/up/single.txt"))).content == "one file"
    obs = await rt.run_in_session(BashAction(command="cat /work/repo/README /work/repo/pkg/mod.py", timeout=20))
    assert obs.output == "readmeX = 1\n"


@pytest.mark.parametrize("environment", ["busybox", "judge"])
def test_remote_runtime_unchanged_on_a_container(corral, platform, environment, tmp_path):
    try:
        sb = corral.sandboxes.create(environment, memory_mb=256)
    except CorralError as exc:
        if environment == "judge" and "unknown environment" in str(exc):
            pytest.skip("no judge environment registered (a Debian tree with bash: scripts/build_fncall_runtime.py)")
        raise
    try:
        sb.wait("running", timeout=60)
        token = token_for(platform, sb.id)
        rt = RemoteRuntime(host=token["url"], port=None, auth_token=token["token"])
        asyncio.run(session_scenario(rt, tmp_path))

        # Every JSON request was a step of the runtime's rollout, in order.
        steps = corral.rollouts.attach(token["rollout_id"]).trajectory()
        assert steps[0].action == "swerex.create_session" and steps[1].action == "swerex.create_session"
        assert steps[1].observation["swerexception"]["class_path"] == "swerex.exceptions.SessionExistsError"

        asyncio.run(rt.close())  # RemoteDeployment.stop(): the sandbox is released
        until_sync(lambda: corral.sandboxes.get(sb.id).state == "terminated", timeout_s=30, what="sandbox released")
    finally:
        if corral.sandboxes.get(sb.id).state not in ("terminated", "failed"):
            sb.delete()


def test_retried_request_never_runs_twice_and_bad_input(corral, platform):
    with corral.sandboxes.create("busybox", memory_mb=64) as sb:
        sb.wait("running", timeout=60)
        token = token_for(platform, sb.id)
        url, headers = token["url"], {"X-API-Key": token["token"]}
        with httpx.Client(timeout=30) as http:
            assert http.post(f"{url}/create_session", json={}, headers={**headers, "X-Request-ID": "s1"}
                             ).status_code == 200
            request_id = str(uuid.uuid4())
            body = {"command": "echo tick >> /tmp/ticks; wc -l < /tmp/ticks", "timeout": 20, "action_type": "bash"}
            first = http.post(f"{url}/run_in_session", json=body, headers={**headers, "X-Request-ID": request_id})
            again = http.post(f"{url}/run_in_session", json=body, headers={**headers, "X-Request-ID": request_id})
            assert first.status_code == again.status_code == 200
            assert first.json() == again.json() and first.json()["output"].strip() == "1"
            assert sb.read_file("/tmp/ticks") == b"tick\n"  # ran once

            # The same request id with another body: a clean 409 that names the header.
            reused = http.post(f"{url}/run_in_session", json={"command": "echo other", "action_type": "bash"},
                               headers={**headers, "X-Request-ID": request_id})
            assert reused.status_code == 409
            assert reused.json()["error"]["code"] == "request_id_reused"
            assert reused.json()["error"]["details"][0]["loc"] == ["header", "x-request-id"]

            # A 511 is logged like any outcome: its retry answers the same exception.
            fail = {"command": "exit_code_7() { return 7; }; exit_code_7", "timeout": 20, "check": "raise", "action_type": "bash"}
            for _ in range(2):
                r = http.post(f"{url}/run_in_session", json=fail, headers={**headers, "X-Request-ID": "f1"})
                assert r.status_code == 511
                assert r.json()["swerexception"]["class_path"] == "swerex.exceptions.NonZeroExitCodeError"

            # Bad input: JSON 4xx with loc, nothing run.
            bad = http.post(f"{url}/create_session", json={"session": "../escape"}, headers=headers)
            assert bad.status_code == 422 and "session" in bad.json()["error"]["details"][0]["loc"]
            bad = http.post(f"{url}/run_in_session", json={"action_type": "nope"}, headers=headers)
            assert bad.status_code == 422
            # Auth: no token, a wrong one, another sandbox's token, another tenant's.
            assert http.get(f"{url}/is_alive").status_code == 401
            assert http.get(f"{url}/is_alive", headers={"X-API-Key": token["rollout_id"] + ".wrong"}
                            ).status_code == 401
            with corral.sandboxes.create("busybox", memory_mb=64) as other:
                other_url = url.replace(sb.id, other.id)
                assert http.get(f"{other_url}/is_alive", headers=headers).status_code == 401
            assert http.post(f"{platform['api']}/v1/sandboxes/{sb.id}/swerex-token",
                             headers={"Authorization": f"Bearer {OTHER_TENANT_KEY}"}).status_code == 404
            # A path that is no sandbox id at all (the contract fuzzer's "(") is no such sandbox, not a 500.
            bad = http.post(f"{platform['api']}/v1/sandboxes/(/swerex-token", headers={"Authorization": f"Bearer {platform['api_key']}"})
            assert bad.status_code == 404 and bad.json()["error"]["details"][0]["loc"] == ["path", "sandbox_id"]
            r = http.get(f"{url}/is_alive", headers=headers)
            assert r.json() == {"is_alive": True, "message": ""}


def test_remote_runtime_unchanged_on_a_microvm(corral, vm_platform, tmp_path):
    """The same scenario through a microVM's guest agent: the session shell lives in the guest."""
    sb = corral.sandboxes.create("busybox", backend="microvm", memory_mb=128)
    try:
        sb.wait("running", timeout=120)
        token = token_for(vm_platform, sb.id)
        rt = RemoteRuntime(host=token["url"], port=None, auth_token=token["token"])
        asyncio.run(session_scenario(rt, tmp_path))
        asyncio.run(rt.close())
        until_sync(lambda: corral.sandboxes.get(sb.id).state == "terminated", timeout_s=60, what="microvm released")
    finally:
        if corral.sandboxes.get(sb.id).state not in ("terminated", "failed"):
            sb.delete()
