"""fncall through the whole platform: api → RabbitMQ work queues → node-agents' warm pools,
driven by the SDK, plain HTTP, and the sandbox-fusion client package from PyPI."""

import asyncio
import base64
import time

import httpx
import pytest

import corral
from tests import live_platform

APLUSB = "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n"


@pytest.fixture(scope="module")
def fncall_ready(platform):
    """Build the runtime tree if this machine has none (cached), then wait for every node's pools."""
    return live_platform.fncall_ready(platform)


@pytest.fixture
def api(fncall_ready):
    with httpx.Client(base_url=fncall_ready["api"], timeout=120,
                      headers={"Authorization": f"Bearer {fncall_ready['api_key']}"}) as client:
        yield client


@pytest.fixture
def sdk(fncall_ready):
    return {"url": fncall_ready["api"], "api_key": fncall_ready["api_key"]}


def test_sdk_fncall_python_and_cpp(sdk):
    r = corral.fncall("python", "print(int(input()) * 2)", tests=[{"stdin": "21", "expected_stdout": "42\n"}], **sdk)
    assert r["verdict"] == "accepted" and r["cases"][0]["stdout"] == "42\n" and r["node_id"].startswith("node-")
    cases = [{"stdin": f"{i} {i}", "expected_stdout": f"{2 * i}\n"} for i in range(10)]
    started = time.monotonic()
    r = corral.fncall("cpp", APLUSB, tests=cases, **sdk)
    assert r["verdict"] == "accepted" and len(r["cases"]) == 10 and r["compile"]["verdict"] == "accepted"
    assert time.monotonic() - started < 10


def test_every_verdict_end_to_end(sdk):
    expect = {
        "accepted": ("python", "print(1)", {"tests": [{"expected_stdout": "1\n"}]}),
        "wrong_answer": ("python", "print(2)", {"tests": [{"expected_stdout": "1\n"}]}),
        "time_limit_exceeded": ("python", "while True: pass", {"time_limit_ms": 300}),
        "memory_limit_exceeded": ("python", "x = []\nwhile True: x.append(bytearray(10**7))", {"memory_limit_mb": 64}),
        "output_limit_exceeded": ("bash", "yes", {"output_limit_kb": 16}),
        "runtime_error": ("c", "int main(){return 3;}", {}),
        "compile_error": ("cpp", "int main( {", {}),
    }
    for verdict, (runtime, code, kw) in expect.items():
        r = corral.fncall(runtime, code, **kw, **sdk)
        assert r["verdict"] == verdict, (verdict, r)


def test_float_and_token_compare(sdk):
    r = corral.fncall("python", "print('%.7f' % (1/3))", tests=[{"expected_stdout": "0.333333333"}],
                      compare="float:1e-6", **sdk)
    assert r["verdict"] == "accepted"
    r = corral.fncall("bash", "echo '1   2'; echo 3", tests=[{"expected_stdout": "1 2 3"}], compare="tokens", **sdk)
    assert r["verdict"] == "accepted"


def test_fncall_many_per_call_and_batch(sdk):
    calls = [{"runtime": "python", "code": f"print({i} * 2)", "tests": [{"expected_stdout": f"{i * 2}\n"}]}
             for i in range(40)]
    for batch in (False, True):
        results = asyncio.run(corral.fncall_many(calls, concurrency=16, batch=batch, **sdk))
        assert [r["verdict"] for r in results] == ["accepted"] * 40
        assert [r["cases"][0]["stdout"] for r in results] == [f"{i * 2}\n" for i in range(40)]


def test_batch_paging_wait_and_stream(api):
    calls = [{"runtime": "bash", "code": f"echo {i}"} for i in range(25)]
    created = api.post("/v1/fncall/batch", json={"calls": calls})
    assert created.status_code == 202 and created.json()["total"] == 25
    batch_id = created.json()["id"]
    page = api.get(f"/v1/fncall/batch/{batch_id}", params={"wait": "true", "limit": 10}).json()
    assert page["status"] == "done" and page["completed"] == 25 and page["verdicts"] == {"accepted": 25}
    assert len(page["results"]) == 10 and page["next_offset"] == 10
    rest = api.get(f"/v1/fncall/batch/{batch_id}", params={"offset": 10, "limit": 100}).json()
    indexes = {r["index"] for r in page["results"] + rest["results"]}
    assert indexes == set(range(25))
    lines = [line for line in api.get(f"/v1/fncall/batch/{batch_id}/stream").text.splitlines() if line]
    assert len(lines) == 26 and '"batch"' in lines[-1]
    assert api.get("/v1/fncall/batch/ffff").status_code == 404


def test_batch_is_private_to_its_tenant(api, fncall_ready):
    from tests.e2e.conftest import OTHER_TENANT_KEY

    batch_id = api.post("/v1/fncall/batch", json={"calls": [{"runtime": "bash", "code": "true"}]}).json()["id"]
    other = httpx.get(f"{fncall_ready['api']}/v1/fncall/batch/{batch_id}",
                      headers={"Authorization": f"Bearer {OTHER_TENANT_KEY}"})
    assert other.status_code == 404


def test_bad_input_gets_clear_4xx(api):
    def post(body, **kw):
        return api.post("/v1/fncall", json=body, **kw)

    r = post({"runtime": "cobol", "code": "DISPLAY 1"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_runtime"
    r = post({"runtime": "python", "code": ""})
    assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["body", "code"]
    for field, value in (("time_limit_ms", 0), ("memory_limit_mb", 0), ("output_limit_kb", 0),
                         ("time_limit_ms", 10**9), ("memory_limit_mb", 10**7)):
        r = post({"runtime": "python", "code": "print(1)", field: value})
        assert r.status_code == 422 and field in r.json()["error"]["message"], (field, r.text)
    r = post({"runtime": "python", "code": "print(1)", "compare": "fuzzy"})
    assert r.status_code == 422
    big = b'{"runtime": "python", "code": "print(1)", "stdin": "' + b"x" * (100 * 1024 * 1024) + b'"}'
    r = api.post("/v1/fncall", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
    assert httpx.post(f"{api.base_url}/v1/fncall", json={"runtime": "python", "code": "1"}).status_code == 401


def test_sandbox_fusion_client_works_unchanged(fncall_ready):
    sandbox_fusion = pytest.importorskip("sandbox_fusion")
    endpoint = f"{fncall_ready['api']}/sandboxfusion/{fncall_ready['api_key']}"
    req = sandbox_fusion.RunCodeRequest
    r = sandbox_fusion.run_code(req(code="print(input()[::-1])", stdin="abc", language="python"),
                                endpoint=endpoint, max_attempts=1)
    assert r.status == sandbox_fusion.RunStatus.Success and r.run_result.stdout == "cba\n"
    r = sandbox_fusion.run_code(req(code=APLUSB, stdin="2 3", language="cpp"), endpoint=endpoint, max_attempts=1)
    assert r.status == sandbox_fusion.RunStatus.Success and r.run_result.stdout == "5\n"
    assert r.compile_result.return_code == 0
    r = sandbox_fusion.run_code(req(code="int main( {", language="cpp"), endpoint=endpoint, max_attempts=1)
    assert r.status == sandbox_fusion.RunStatus.Failed and r.run_result is None and r.compile_result.return_code != 0
    r = sandbox_fusion.run_code(req(code="exit 4", language="bash"), endpoint=endpoint, max_attempts=1)
    assert r.status == sandbox_fusion.RunStatus.Failed and r.run_result.return_code == 4
    r = sandbox_fusion.run_code(req(code="import time; time.sleep(10)", language="python", run_timeout=0.5),
                                endpoint=endpoint, max_attempts=1)
    assert r.run_result.status == sandbox_fusion.CommandRunStatus.TimeLimitExceeded
    r = sandbox_fusion.run_code(req(code="open('o.txt','w').write(open('i.txt').read() * 2)", language="python",
                                    files={"i.txt": base64.b64encode(b"ab").decode()}, fetch_files=["o.txt"]),
                                endpoint=endpoint, max_attempts=1)
    assert base64.b64decode(r.files["o.txt"]) == b"abab"
    summary = sandbox_fusion.summary_run_code_result(r, sandbox_fusion.SummaryMapping())
    assert summary == "Success"
    # and with the key in a header on the plain path
    plain = httpx.post(f"{fncall_ready['api']}/run_code", json={"code": "echo hi", "language": "bash"},
                       headers={"Authorization": f"Bearer {fncall_ready['api_key']}"})
    assert plain.json()["run_result"]["stdout"] == "hi\n"
    assert httpx.post(f"{fncall_ready['api']}/sandboxfusion/wrong-key/run_code",
                      json={"code": "echo hi", "language": "bash"}).status_code == 401


def test_metrics(api, fncall_ready):
    corral.fncall("python", "print(1)", url=fncall_ready["api"], api_key=fncall_ready["api_key"])
    # platform-wide numbers: the internal token's (a tenant's key is refused)
    assert api.get("/metrics").status_code == 401
    text = api.get("/metrics", headers={"Authorization": f"Bearer {fncall_ready['internal_token']}"}).text
    for name in ("corral_fncall_api_calls_total", "corral_fncall_api_latency_seconds_bucket",
                 "corral_fncall_api_queue_depth", "corral_fncall_api_calls_per_second"):
        assert name in text, name
    node = httpx.get(f"{fncall_ready['urls']['node-1']}/metrics").text
    for name in ("corral_fncall_pool_size", "corral_fncall_pool_busy", "corral_fncall_calls_total",
                 "corral_fncall_queue_depth"):
        assert name in node, name
    assert 'corral_fncall_pool_size{node="node-1",runtime="python"}' in node
    # the call ran on one of the nodes (whichever pool took it from the work queue)
    nodes = [httpx.get(f"{url}/metrics").text for name, url in fncall_ready["urls"].items() if name.startswith("node-")]
    assert any("corral_fncall_call_seconds_bucket" in text for text in nodes)
