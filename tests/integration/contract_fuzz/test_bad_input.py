"""Each kind of bad input issue 10 found, sent to the live services (conftest.py) over HTTP:
the answer is a JSON 4xx naming the field, the connection stays usable, and nothing is made.

The tenant ``inputs`` owns one running sandbox (for exec); after every test it still owns
exactly that one, no job and no rollout, and the fake node ran nothing it was not asked to.
"""

import json

import httpx
import pytest
import redis

from tests.integration.contract_fuzz.conftest import INPUTS_KEY, INPUTS_TENANT, TOKEN

BAD_NAMES = ["busybox\t", "busy\x01box", "busybox\n", "busybox/", "../../healthz", "busybox?x=1", "busybox#x",
             "%2e%2e", ".", "..", "Busybox", " busybox", "-busybox", "b" * 65, "nul\x00"]


@pytest.fixture(scope="module")
def inputs_sandbox(fuzz_platform) -> str:
    with httpx.Client(base_url=fuzz_platform["api"], headers={"authorization": f"Bearer {INPUTS_KEY}"}) as c:
        created = c.post("/v1/sandboxes", params={"wait_for": "running", "timeout": 30},
                         json={"environment": "busybox"}, timeout=60)
    assert created.status_code == 202 and created.json()["state"] == "running", created.text
    return created.json()["id"]


@pytest.fixture
def api(fuzz_platform, inputs_sandbox):
    """A client of the api as tenant ``inputs``, over one kept-alive connection."""
    backend = fuzz_platform["backend"]
    calls_before = list(backend.calls)
    with httpx.Client(base_url=fuzz_platform["api"], headers={"authorization": f"Bearer {INPUTS_KEY}"},
                      timeout=30, limits=httpx.Limits(max_connections=1)) as client:
        yield client
        assert client.get("/healthz").status_code == 200  # the connection outlived every refusal
        assert [s["id"] for s in client.get("/v1/sandboxes").json()["items"]] == [inputs_sandbox]
        assert client.get("/v1/rollouts").json()["items"] == []
    store = redis.Redis.from_url(fuzz_platform["redis_url"])
    assert store.smembers(f"sb:tenant:{INPUTS_TENANT}") == {inputs_sandbox.encode()}
    assert store.scard(f"jobs:tenant:{INPUTS_TENANT}") == 0
    store.close()
    assert [c for c in backend.calls[len(calls_before):] if c[1] == inputs_sandbox and c[0] != "exec"] == []


def refused(response: httpx.Response, status: int, code: str, loc: list) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == code, error
    assert error["details"][0]["loc"] == loc, error
    return error


def raw(client: httpx.Client, method: str, path: str, body: str) -> httpx.Response:
    """``body`` is JSON text as sent: ``\\ud800`` escapes stay escapes."""
    return client.request(method, path, content=body.encode(), headers={"content-type": "application/json"})


# ---- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BAD_NAMES)
def test_an_environment_name_no_catalogue_could_hold_is_invalid_name_everywhere(api, name):
    error = refused(api.post("/v1/sandboxes", json={"environment": name}), 422, "invalid_name",
                    ["body", "environment"])
    assert repr(name) in error["message"]
    refused(api.post("/v1/jobs", json={"spec": {"environment": name}, "count": 2}), 422, "invalid_name",
            ["body", "spec", "environment"])
    refused(api.post("/v1/rollouts", json={"job_id": "j", "sandbox": {"environment": name}}), 422,
            "invalid_name", ["body", "sandbox", "environment"])


def test_unknown_names_are_a_422_before_anything_is_made(api):
    refused(api.post("/v1/sandboxes", json={"environment": "nope"}), 422, "unknown_environment",
            ["body", "environment"])
    refused(api.post("/v1/jobs", json={"spec": {"environment": "nope"}, "count": 3}), 422, "unknown_environment",
            ["body", "spec", "environment"])
    refused(api.post("/v1/sandboxes", json={"disk_image": "nope"}), 422, "unknown_disk_image", ["body", "disk_image"])
    refused(api.post("/v1/sandboxes", json={"disk_image": "nope:1"}), 422, "unknown_disk_image",
            ["body", "disk_image"])
    for ref in ("a:b:c", "../x", "x:", "Ubuntu"):
        refused(api.post("/v1/sandboxes", json={"disk_image": ref}), 422, "invalid_name", ["body", "disk_image"])
    refused(api.post("/v1/sandboxes", json={"from_snapshot": "../x"}), 422, "validation_error",
            ["body", "from_snapshot"])


# ---- text that is no text -----------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "body", "loc"), [
    ("POST", "/v1/sandboxes", '{"environment": "busybox", "labels": {"a": "\\ud800"}}', ["body", "labels", "a"]),
    ("POST", "/v1/sandboxes", '{"environment": "busybox", "labels": {"\\udc00x": "v"}}',
     ["body", "labels", "\\udc00x"]),
    ("POST", "/v1/sandboxes", '{"environment": "busybox", "env": {"A": "x\\uDBFF"}}', ["body", "env", "A"]),
    ("POST", "/v1/jobs", '{"spec": {"environment": "busybox"}, "count": 1, "labels": {"k": "\\ud800"}}',
     ["body", "labels", "k"]),
    ("POST", "/v1/rollouts", '{"job_id": "j", "metadata": {"k": ["\\ud800"]}, "sandbox": {"environment": "busybox"}}',
     ["body", "metadata", "k", 0]),
    ("POST", "/v1/fncall", '{"runtime": "python", "code": "print(1)", "files": {"\\ud800.py": "eA=="}}',
     ["body", "files", "\\ud800.py"]),
])
def test_a_lone_surrogate_anywhere_in_a_body_is_invalid_text_naming_the_field(api, method, path, body, loc):
    error = refused(raw(api, method, path, body), 422, "invalid_text", loc)
    assert "surrogate" in error["message"]


def test_exec_refuses_surrogates_and_nul_before_the_node_runs_anything(api, fuzz_platform, inputs_sandbox):
    exec_path = f"/v1/sandboxes/{inputs_sandbox}/exec"
    execs = sum(1 for c in fuzz_platform["backend"].calls if c == ("exec", inputs_sandbox))
    refused(raw(api, "POST", exec_path, '{"cmd": ["echo", "\\ud800"]}'), 422, "invalid_text", ["body", "cmd", 1])
    refused(raw(api, "POST", exec_path, '{"cmd": "echo", "env": {"A": "\\udfff"}}'), 422, "invalid_text",
            ["body", "env", "A"])
    refused(raw(api, "POST", exec_path, '{"cmd": "echo", "stdin": "\\ud800"}'), 422, "invalid_text",
            ["body", "stdin"])
    for body, loc in [({"cmd": ["echo", "a\0b"]}, ["body", "cmd"]), ({"cmd": "echo a\0b"}, ["body", "cmd"]),
                      ({"cmd": "true", "env": {"A": "x\0y"}}, ["body", "env"]),
                      ({"cmd": "true", "cwd": "/tmp\0x"}, ["body", "cwd"])]:
        refused(api.post(exec_path, json=body), 422, "invalid_text", loc)
        refused(api.post(f"{exec_path}/stream", json=body), 422, "invalid_text", loc)
    assert sum(1 for c in fuzz_platform["backend"].calls if c == ("exec", inputs_sandbox)) == execs
    # A surrogate pair is one character, and fine.
    ran = raw(api, "POST", exec_path, '{"cmd": ["echo", "\\ud83d\\ude00"]}')
    assert ran.status_code == 200, ran.text
    assert sum(1 for c in fuzz_platform["backend"].calls if c == ("exec", inputs_sandbox)) == execs + 1


def test_the_node_agent_refuses_the_same_exec_with_the_same_answer(fuzz_platform):
    sandbox = fuzz_platform["sandboxes"]["node-agent"]
    with httpx.Client(base_url=fuzz_platform["node-agent"], headers={"x-corral-internal-token": TOKEN}) as node:
        refused(node.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "true", "env": {"A": "\0"}}), 422,
                "invalid_text", ["body", "env"])
        refused(raw(node, "POST", f"/v1/sandboxes/{sandbox}/exec", '{"cmd": ["\\ud800"]}'), 422, "invalid_text",
                ["body", "cmd", 0])


def test_a_nul_at_create_is_refused_not_cut_short(api):
    refused(api.post("/v1/sandboxes", json={"environment": "busybox", "env": {"A": "before\0after"}}), 422,
            "invalid_text", ["body", "env"])
    refused(api.post("/v1/jobs", json={"spec": {"environment": "busybox", "env": {"A": "\0"}}, "count": 1}), 422,
            "invalid_text", ["body", "spec", "env"])
    refused(api.post("/v1/rollouts", json={"job_id": "j\0", "sandbox": {"environment": "busybox"}}), 422,
            "invalid_text", ["body", "job_id"])


def test_a_nul_in_the_url_is_invalid_text_naming_the_parameter(api, inputs_sandbox):
    refused(api.get(f"/v1/sandboxes/{inputs_sandbox}/files", params={"path": "/etc/\0passwd"}), 422, "invalid_text",
            ["query", "path"])
    refused(api.get("/v1/rollouts", params={"job_id": "j\0"}), 422, "invalid_text", ["query", "job_id"])
    refused(api.get("/v1/sandboxes/sb-%00"), 422, "invalid_text", ["path"])


# ---- every error is the JSON body -------------------------------------------------------------


@pytest.mark.parametrize(("service", "path", "allow"), [
    ("api", "/v1/sandboxes", "DELETE, GET, OPTIONS, POST"),
    ("api", "/v1/sandboxes/sb-1/files", "GET, OPTIONS, PUT"),
    ("api", "/v1/sandboxes/sb-1", "DELETE, GET, OPTIONS"),
    ("image-service", "/v1/environments", "GET, OPTIONS, POST"),
    ("node-agent", "/v1/sandboxes/sb-1/exec", "OPTIONS, POST"),
])
def test_options_and_a_wrong_method_say_allow_with_every_method_of_the_path(fuzz_platform, service, path, allow):
    with httpx.Client(base_url=fuzz_platform[service]) as client:
        options = client.options(path)
        assert options.status_code == 204 and options.headers["allow"] == allow and options.content == b""
        wrong = client.request("PATCH", path)
        assert wrong.status_code == 405 and wrong.headers["allow"] == allow
        assert wrong.json()["error"]["code"] == "method_not_allowed"
        missing = client.options("/v1/nothing-here")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_invalid_json_and_utf8_are_json_4xx(api):
    bad = raw(api, "POST", "/v1/sandboxes", '{"environment": ')
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "validation_error"
    undecodable = api.post("/v1/sandboxes", content=b'{"environment": "\xff\xfe"}',
                           headers={"content-type": "application/json"})
    assert 400 <= undecodable.status_code < 500 and "error" in json.loads(undecodable.content)
