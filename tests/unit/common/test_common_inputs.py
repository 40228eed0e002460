"""The input checks every service shares (corral_common.inputs) and the request guard and error
handlers installed in every app (corral_common.web.guards, corral_common.web.errors)."""

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel, ValidationError

from corral_api.sandboxes.schemas import SandboxCreate
from corral_common import inputs
from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec
from corral_common.web.guards import InvalidText, check_json_text, nul_in_url, unencodable
from corral_common.web.handlers import install_error_handlers


@pytest.mark.parametrize("name", ["busybox", "judge", "debian-12", "a", "py3.12_slim", "0day", "b" * 64])
def test_catalogue_names_pass(name):
    assert inputs.valid_name(name) == name
    assert inputs.valid_disk_image(f"{name}:V1.2-rc_3") == f"{name}:V1.2-rc_3"


@pytest.mark.parametrize("name", ["busybox\t", "busybox\n", "Busybox", "busybox/", "../x", ".", "..", "-a", "_a",
                                  "a b", "busybox?x=1", "b" * 65, "nul\x00", "é"])
def test_other_names_are_invalid_name(name):
    with pytest.raises(Exception) as info:
        inputs.valid_name(name)
    assert info.value.type == inputs.INVALID_NAME and repr(name) in info.value.message()


def test_disk_image_refs():
    assert inputs.valid_disk_image(None) is None and inputs.valid_disk_image("") == ""
    for ref in ("a:b:c", "a:", ":1", "a:-1", "A:1", "a/b:1"):
        with pytest.raises(Exception) as info:
            inputs.valid_disk_image(ref)
        assert info.value.type == inputs.INVALID_NAME
    assert inputs.split_disk_image_ref("ubuntu") == ("ubuntu", "")
    assert inputs.split_disk_image_ref("ubuntu:24.04") == ("ubuntu", "24.04")


def test_the_image_service_validates_with_the_same_patterns():
    from corral_image_service.layers import schemas

    assert (schemas.NAME_PATTERN, schemas.VERSION_PATTERN, schemas.REF_PATTERN) == (
        inputs.NAME_PATTERN, inputs.VERSION_PATTERN, inputs.REF_PATTERN)


@pytest.mark.parametrize(("fields", "loc"), [
    ({"cmd": ["echo", "a\0"]}, ("cmd",)), ({"cmd": "echo \0"}, ("cmd",)),
    ({"cmd": "true", "cwd": "/\0"}, ("cwd",)), ({"cmd": "true", "env": {"A": "\0"}}, ("env",)),
])
def test_exec_requests_with_nul_are_invalid_text(fields, loc):
    with pytest.raises(ValidationError) as info:
        ExecRequest(**fields)
    error = info.value.errors()[0]
    assert (error["type"], error["loc"]) == (inputs.INVALID_TEXT, loc)


def test_exec_env_names_follow_the_spec_rule_and_the_create_body_refuses_nul_values():
    for env in ({"": "x"}, {"A=B": "x"}, {"A\0": "x"}, {"A" * 257: "x"}, {f"V{i}": "x" for i in range(257)}):
        with pytest.raises(ValidationError):
            ExecRequest(cmd="true", env=env)
        with pytest.raises(ValidationError):
            SandboxSpec(environment="e", env=env)
    assert ExecRequest(cmd=["a", "ü😀"], cwd="/tmp", env={"A": "x=y"}).env == {"A": "x=y"}
    # A stored spec is read back whatever its env values; a new request is judged.
    assert SandboxSpec(environment="e", env={"A": "x\0y"}).env == {"A": "x\0y"}
    with pytest.raises(ValidationError) as info:
        SandboxCreate(environment="e", env={"A": "x\0y"})
    assert info.value.errors()[0]["type"] == inputs.INVALID_TEXT


def test_a_create_body_judges_names_but_a_stored_spec_is_read_back_as_it_is():
    assert SandboxSpec(environment="../../healthz").environment == "../../healthz"
    for fields, loc in [({"environment": "a/b"}, "environment"), ({"disk_image": "a::b"}, "disk_image")]:
        with pytest.raises(ValidationError) as info:
            SandboxCreate(**fields)
        assert info.value.errors()[0]["type"] == inputs.INVALID_NAME and info.value.errors()[0]["loc"] == (loc,)
    with pytest.raises(ValidationError):
        SandboxCreate(environment="e", from_snapshot="snap/../x")
    assert SandboxCreate(environment="e", from_snapshot="snap-0a1b").from_snapshot == "snap-0a1b"


# ---- the guard --------------------------------------------------------------------------------


def test_unencodable_finds_the_first_lone_surrogate_with_its_location():
    assert unencodable({"a": ["x", {"b": "ok 😀"}]}, ["body"]) is None
    assert unencodable({"a": ["x", {"b": "\ud800"}]}, ["body"]) == (["body", "a", 1, "b"], "\\ud800")
    assert unencodable({"k\udfff": 1}, ["body"]) == (["body", "k\\udfff"], "k\\udfff")


def test_check_json_text_parses_only_bodies_with_a_surrogate_escape():
    check_json_text(b'{"a": "\\ud83d\\ude00"}')  # a pair: one character
    check_json_text(b'{"a": "\\\\ud800"}')  # an escaped backslash, then text
    check_json_text(b'{"a": "\\ud800')  # not JSON: the route says so
    with pytest.raises(InvalidText) as info:
        check_json_text(b'{"cmd": ["a", "\\uD800"]}')
    assert (info.value.status_code, info.value.code, info.value.loc) == (422, "invalid_text", ["body", "cmd", 1])


def test_nul_in_url():
    assert nul_in_url({"path": "/v1/x", "query_string": b"a=1&b=%01"}) is None
    assert nul_in_url({"path": "/v1/x\0", "query_string": b""}).loc == ["path"]
    assert nul_in_url({"path": "/v1/x", "query_string": b"a=1&path=%2Fetc%00"}).loc == ["query", "path"]


class Body(BaseModel):
    labels: dict[str, str] = {}


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/things")
    async def make(body: Body) -> dict:
        return {"labels": body.labels}

    @app.get("/things")
    async def things() -> list:
        return []

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("internal detail")

    return app


async def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=_app(), raise_app_exceptions=False),
                             base_url="http://app")


async def test_a_surrogate_split_across_body_chunks_is_found():
    async def chunks():
        yield b'{"labels": {"a": "\\u'
        yield b'd800"}}'

    async with await _client() as client:
        response = await client.post("/things", content=chunks(), headers={"content-type": "application/json"})
        assert response.status_code == 422 and response.json()["error"]["details"][0]["loc"] == ["body", "labels", "a"]
        ok = await client.post("/things", content=b'{"labels": {"a": "\\u00e9"}}',
                               headers={"content-type": "application/json"})
        assert ok.json() == {"labels": {"a": "é"}}


async def test_unexpected_exceptions_405_and_options_are_answered_in_the_error_shape():
    async with await _client() as client:
        boom = await client.get("/boom")
        assert boom.status_code == 500 and boom.json()["error"]["code"] == "internal_error"
        assert "internal detail" not in boom.text
        wrong = await client.delete("/things")
        assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, OPTIONS, POST"
        assert wrong.json()["error"]["code"] == "method_not_allowed"
        options = await client.options("/things")
        assert options.status_code == 204 and options.headers["allow"] == "GET, OPTIONS, POST"
        assert (await client.options("/nothing")).json()["error"]["code"] == "not_found"
