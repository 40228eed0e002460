"""SandboxFusion on the live platform, driven by the sandbox-fusion PyPI client unchanged and by
the exact body verl's reward posts: every language (one accepted, one failing program), upstream's
status rules, /v1/ping, the credential-less operator port, bad input."""

import base64
import concurrent.futures
import time

import httpx
import pytest

from tests.fncall_programs import COMPILED_FAILS, LANGUAGES, accepted
from tests.fncall_programs import FAILING as FAILING_CODE
from tests.live_platform import fncall_ready as _fncall_ready

sandbox_fusion = pytest.importorskip("sandbox_fusion", reason="sandbox-fusion (requirements-dev.txt) is not installed")


@pytest.fixture(scope="module")
def ready(platform):
    return _fncall_ready(platform)


def keyed(platform) -> str:
    return f"{platform['api']}/sandboxfusion/{platform['api_key']}"


def verl_body(code: str, language: str, stdin: str = "") -> dict:
    """What verl/utils/reward_score/sandbox_fusion/utils.py posts (call_sandbox_api)."""
    return {"compile_timeout": 10, "run_timeout": 10, "code": code, "stdin": stdin, "memory_limit_MB": 1024,
            "language": language, "files": {}, "fetch_files": []}


def test_verl_shaped_request_and_ping(ready):
    # verl posts with requests to the URL it was given (already ending in /run_code), timeout
    # compile + run + 10 s, and retries only on 504.
    started = time.monotonic()
    r = httpx.post(f"{keyed(ready)}/run_code", json=verl_body("print(int(input()) * 2)", "python", "21"),
                   timeout=10 + 10 + 10)
    assert r.status_code == 200 and time.monotonic() - started < 30
    body = r.json()
    assert set(body) == {"status", "message", "compile_result", "run_result", "executor_pod_name", "files"}
    assert body["status"] == "Success" and body["run_result"]["stdout"] == "42\n"
    assert body["run_result"]["status"] == "Finished" and body["run_result"]["return_code"] == 0
    assert body["executor_pod_name"].startswith("node-")
    assert httpx.get(f"{keyed(ready)}/v1/ping").json() == "pong"
    # The PyPI client, as verl's SkyRL-style users set it up (endpoint only, no credentials).
    sandbox_fusion.set_endpoint(keyed(ready))
    resp = sandbox_fusion.run_code(sandbox_fusion.RunCodeRequest(code="echo $((6 * 7))", language="bash"),
                                   max_attempts=1, client_timeout=30)
    assert resp.status == sandbox_fusion.RunStatus.Success and resp.run_result.stdout == "42\n"


def _run(endpoint: str, code: str, language: str, stdin: str = ""):
    """Through the PyPI client; "c" (Corral's, not in the client's Language list) as raw JSON."""
    # Generous limits: this checks each toolchain, not its speed on a loaded 2-core host.
    limits = {"compile_timeout": 60, "run_timeout": 30}
    if language in sandbox_fusion.models.Language.__args__:
        request = sandbox_fusion.RunCodeRequest(code=code, language=language, stdin=stdin, **limits)
        return sandbox_fusion.run_code(request, endpoint=endpoint, max_attempts=1, client_timeout=120)
    body = httpx.post(f"{endpoint}/run_code", json={"code": code, "language": language, "stdin": stdin, **limits},
                      timeout=120)
    return sandbox_fusion.RunCodeResponse(**body.json())


def _pair(endpoint: str, language: str):
    stdin = "" if language == "pytest" else "40 2\n"
    return language, _run(endpoint, accepted(language), language, stdin), _run(endpoint, FAILING_CODE[language],
                                                                                 language)


def test_every_language_accepted_and_failing(ready):
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda lang: _pair(keyed(ready), lang), LANGUAGES))
    assert len(results) >= 12
    for language, ok, bad in results:
        assert ok.status == sandbox_fusion.RunStatus.Success, (language, ok)
        if language != "pytest":
            assert ok.run_result.stdout == "42\n", (language, ok)
        assert bad.status == sandbox_fusion.RunStatus.Failed, (language, bad)
        if language in COMPILED_FAILS:
            assert bad.run_result is None and bad.compile_result.return_code != 0, (language, bad)
        else:
            assert bad.run_result.status == sandbox_fusion.CommandRunStatus.Finished, (language, bad)
            assert bad.run_result.return_code != 0, (language, bad)


def test_operator_port_serves_run_code_at_the_root_without_credentials(ready):
    url = ready["sandboxfusion"]
    assert url.startswith("http://127.0.0.1:")  # loopback by default
    assert httpx.get(f"{url}/v1/ping").json() == "pong"
    # SkyRL's coder1 verifier: POST http://{host}:PORT/run_code {language, code, stdin, run_timeout}.
    r = httpx.post(f"{url}/run_code", json={"language": "python", "code": "print(input())", "stdin": "hi",
                                            "run_timeout": 5}, timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "Success" and r.json()["run_result"]["stdout"] == "hi\n"
    sandbox_fusion.set_endpoint(url)
    resp = sandbox_fusion.run_code(sandbox_fusion.RunCodeRequest(code=accepted("cpp"), language="cpp", stdin="1 2"),
                                   max_attempts=1, client_timeout=60)
    assert resp.status == sandbox_fusion.RunStatus.Success and resp.run_result.stdout == "3\n"
    # Nothing else of the api is reachable through it.
    assert httpx.get(f"{url}/v1/sandboxes").status_code == 404
    assert httpx.post(f"{url}/v1/fncall", json={"runtime": "python", "code": "print(1)"}).status_code == 404


def test_bad_input(ready):
    base = keyed(ready)
    # A name outside SandboxFusion's list: 422 with where; one in its list without a toolchain: SandboxError.
    r = httpx.post(f"{base}/run_code", json={"code": "x", "language": "cobol"})
    assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"][:2] == ["body", "language"]
    r = httpx.post(f"{base}/run_code", json={"code": "x", "language": "cuda"}, timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "SandboxError" and "not supported" in r.json()["message"]
    # Oversized files map: 413 with where, nothing run.
    big = base64.b64encode(b"\0" * (17 * 1024 * 1024)).decode()
    r = httpx.post(f"{base}/run_code", json={"code": "print(1)", "language": "python", "files": {"big.bin": big}},
                   timeout=60)
    assert r.status_code == 413 and r.json()["error"]["details"][0]["loc"][0] == "body"
    r = httpx.post(f"{base}/run_code", json={"code": "print(1)", "language": "python",
                                             "files": {"../escape": "aGk="}}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["details"][0]["loc"][:2] == ["body", "files"]
    r = httpx.post(f"{base}/run_code", json={"code": "print(1)", "language": "python", "run_timeout": -1})
    assert r.status_code == 422
    assert httpx.post(f"{ready['api']}/sandboxfusion/wrong-key/run_code",
                      json={"code": "x", "language": "python"}).status_code == 401
