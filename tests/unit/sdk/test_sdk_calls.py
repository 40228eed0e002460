"""The request builders (corral._calls) and the operations both SDK flavours run over them.

The builders must send what the generated client sends for the same operation (the wire
did not change when the SDK stopped calling through it). The scenarios run every SDK call
against an httpx.MockTransport (a stand-in for the network, not for the SDK), once with
``Corral`` and once with ``AsyncCorral``, and assert the same requests and results."""

import asyncio
import functools
import inspect
import json
import threading

import httpx
import pytest

from corral import _calls as calls
from corral._common import create_body, exec_body, input_body, text_event
from corral._transport import AsyncTransport, Concurrently, Sleep, SyncTransport
from corral.aio import AsyncCorral
from corral.client import Corral
from corral.errors import CorralError, SandboxFailed
from corral.fncall import fncall, fncall_body, fncall_many
from corral.rollouts import StepFailed
from corral_client.api.admin import (
    create_key,
    create_tenant,
    get_tenant,
    get_usage,
    list_keys,
    list_tenants,
    revoke_key,
    rotate_key,
    update_tenant,
)
from corral_client.api.fncall import create_fncall_batch, get_fncall_batch
from corral_client.api.fncall import fncall as generated_fncall
from corral_client.api.jobs import create_job, delete_job, get_job, list_jobs
from corral_client.api.nodes import list_nodes
from corral_client.api.rollouts import create_rollout, finish_rollout, get_rollout, list_rollouts, rollout_step
from corral_client.api.sandboxes import (
    create_sandbox,
    delete_sandbox,
    delete_sandboxes,
    exec_command,
    exec_command_stream,
    get_sandbox,
    get_screen,
    list_files,
    list_sandboxes,
    pause_sandbox,
    read_file,
    resume_sandbox,
    send_input,
    snapshot_sandbox,
    write_file,
)
from corral_client.api.snapshots import delete_snapshot, get_snapshot, list_snapshots
from corral_client.models import InputRequest
from corral_client.models import Sandbox as SandboxInfo
from corral_client.types import File

URL = "http://corral.test"
T0 = "2026-01-01T00:00:00+00:00"


class _Body:
    """Stands in for a generated request model: the body our builder got, as it is."""

    def __init__(self, raw):
        self.raw = raw

    def to_dict(self):
        return self.raw


@functools.cache
def _builder() -> httpx.Client:
    return httpx.Client(base_url=URL)


def _request(kwargs: dict) -> httpx.Request:
    return _builder().build_request(kwargs.pop("method").upper(), kwargs.pop("url"), **kwargs)


def _body(request: httpx.Request):
    return json.loads(request.content) if request.headers.get("content-type") == "application/json" else request.content


def _same_request(call: calls.Call, generated: dict, *, body: bool = True) -> None:
    ours, theirs = _request({"method": call.method, "url": call.url, **call.request_args()}), _request(dict(generated))
    assert (ours.method, ours.url.path) == (theirs.method, theirs.url.path)
    if body:
        kind = ours.headers.get("content-type")
        assert (ours.url, kind) == (theirs.url, theirs.headers.get("content-type"))
        assert _body(ours) == _body(theirs)


def test_builders_send_what_the_generated_client_sends():
    spec = create_body("busybox", memory_mb=64, labels={"a": "b"})
    run = exec_body("echo hi", timeout_s=5)
    raw = exec_body("cat blob", output_encoding="base64")
    pairs = [
        (calls.create_sandbox(spec), create_sandbox._get_kwargs(body=spec)),
        (calls.create_sandbox(spec, wait_for="running", timeout=120.0),
         create_sandbox._get_kwargs(body=spec, wait_for="running", timeout=120.0)),
        (calls.get_sandbox("sb-1"), get_sandbox._get_kwargs("sb-1")),
        (calls.get_sandbox("sb/1", wait_for="terminated", timeout=5), get_sandbox._get_kwargs("sb/1", wait_for="terminated", timeout=5)),
        (calls.list_sandboxes({"a": "b", "c": "d"}, "running"), list_sandboxes._get_kwargs(label=["a=b", "c=d"], state="running")),
        (calls.list_sandboxes(), list_sandboxes._get_kwargs(label=[])),
        (calls.delete_sandboxes({"job": "job-1"}), delete_sandboxes._get_kwargs(label=["job=job-1"])),
        (calls.delete_sandbox("sb-1", wait=True, timeout=30), delete_sandbox._get_kwargs("sb-1", wait=True, timeout=30)),
        (calls.exec_command("sb-1", run), exec_command._get_kwargs("sb-1", body=run)),
        (calls.exec_command_stream("sb-1", run), exec_command_stream._get_kwargs("sb-1", body=run)),
        (calls.exec_command("sb-1", raw), exec_command._get_kwargs("sb-1", body=raw)),
        (calls.list_files("sb-1", "work"), list_files._get_kwargs("sb-1", path="work")),
        (calls.read_file("sb-1", "a.txt"), read_file._get_kwargs("sb-1", path="a.txt")),
        (calls.pause_sandbox("sb-1"), pause_sandbox._get_kwargs("sb-1")),
        (calls.resume_sandbox("sb-1"), resume_sandbox._get_kwargs("sb-1")),
        (calls.get_screen("sb-1"), get_screen._get_kwargs("sb-1")),
        (calls.send_input("sb-1", [text_event("hi")]),
         send_input._get_kwargs("sb-1", body=InputRequest.from_dict(input_body([text_event("hi")])))),
        (calls.snapshot_sandbox("sb-1"), snapshot_sandbox._get_kwargs("sb-1")),
        (calls.list_snapshots("sb-1"), list_snapshots._get_kwargs(sandbox_id="sb-1")),
        (calls.list_snapshots(), list_snapshots._get_kwargs()),
        (calls.get_snapshot("snap-1"), get_snapshot._get_kwargs("snap-1")),
        (calls.delete_snapshot("snap-1"), delete_snapshot._get_kwargs("snap-1")),
        (calls.get_job("job-1"), get_job._get_kwargs("job-1")),
        (calls.list_jobs(), list_jobs._get_kwargs()),
        (calls.list_nodes(), list_nodes._get_kwargs()),
        (calls.delete_job("job-1"), delete_job._get_kwargs("job-1")),
        (calls.create_rollout({"job_id": "j"}, wait=False, timeout=9.0),
         create_rollout._get_kwargs(body=_Body({"job_id": "j"}), wait=False, timeout=9.0)),
        (calls.get_rollout("ro-1"), get_rollout._get_kwargs("ro-1")),
        (calls.write_file("sb-1", "a.txt", "x"), write_file._get_kwargs("sb-1", body=File(payload=b"x"), path="a.txt")),
    ]
    for ours, generated in pairs:
        _same_request(ours, generated)
    # bodies the old SDK built by hand (kept as they were): only method and path are compared
    for ours, generated in [
        (calls.create_job({}), create_job._get_kwargs(body=_Body({}))),
        (calls.list_rollouts("j"), list_rollouts._get_kwargs(job_id="j")),
        (calls.rollout_step("ro-1", {}), rollout_step._get_kwargs("ro-1", body=_Body({}))),
        (calls.finish_rollout("ro-1", {}), finish_rollout._get_kwargs("ro-1", body=_Body({}))),
        (calls.fncall({}), generated_fncall._get_kwargs(body=_Body({}))),
        (calls.create_fncall_batch([]), create_fncall_batch._get_kwargs(body=_Body({}))),
        (calls.get_fncall_batch("fb-1", offset=0, limit=10, timeout=1), get_fncall_batch._get_kwargs("fb-1")),
        (calls.list_tenants(), list_tenants._get_kwargs()),
        (calls.create_tenant({}), create_tenant._get_kwargs(body=_Body({}))),
        (calls.get_tenant("t/1"), get_tenant._get_kwargs("t/1")),
        (calls.update_tenant("t", {}), update_tenant._get_kwargs("t", body=_Body({}))),
        (calls.list_keys("t"), list_keys._get_kwargs(tenant="t")),
        (calls.create_key({}), create_key._get_kwargs(body=_Body({}))),
        (calls.rotate_key("key-1"), rotate_key._get_kwargs("key-1")),
        (calls.revoke_key("key-1"), revoke_key._get_kwargs("key-1")),
        (calls.get_usage(), get_usage._get_kwargs()),
    ]:
        _same_request(ours, generated, body=False)


# ---- a fake api behind httpx.MockTransport ------------------------------------------------

def sandbox(sandbox_id: str = "sb-1", state: str = "running", **extra) -> dict:
    return {"id": sandbox_id, "state": state, "backend": "container", "cpu": 1.0, "created_at": T0, "disk_mb": 512,
            "environment": "busybox", "memory_mb": 64, "timeout_s": 3600, **extra}


def snapshot(snapshot_id: str = "snap-1") -> dict:
    return {"id": snapshot_id, "sandbox_id": "sb-1", "node_id": "node-1", "backend": "microvm", "cpu": 1.0,
            "created_at": T0, "environment": "busybox", "memory_mb": 256}


def rollout(rollout_id: str = "ro-1", step_count: int = 0, **extra) -> dict:
    return {"id": rollout_id, "job_id": "job-7", "sandbox_id": "sb-1", "status": "active", "step_count": step_count,
            "metadata": {}, "owns_sandbox": True, "idle_pause_s": 300, "ttl_s": 86400, "created_at": T0,
            "updated_at": T0, **extra}


def step(index: int, action: str = "exec", status: str = "done", **extra) -> dict:
    return {"index": index, "action": action, "args": {}, "status": status, "request_hash": "h", "started_at": T0,
            **extra}


class FakeApi:
    """Answers from a queue per (method, path); records every request."""

    def __init__(self):
        self.answers: dict[tuple[str, str], list] = {}
        self.requests: list[httpx.Request] = []
        self.lock = threading.Lock()

    def on(self, method: str, path: str, *answers) -> "FakeApi":
        self.answers.setdefault((method, path), []).extend(answers)
        return self

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.requests.append(request)
            queue = self.answers[request.method, request.url.path]
            answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        status, payload = answer if isinstance(answer, tuple) else (200, answer)
        if isinstance(payload, bytes):
            return httpx.Response(status, content=payload)
        return httpx.Response(status, json=payload)

    def sent(self) -> list[tuple[str, str]]:
        return [(r.method, str(r.url).removeprefix(URL)) for r in self.requests]

    def bodies(self) -> list:
        return [_body(r) or None for r in self.requests]


def connected(flavour: str, api: FakeApi):
    mock = httpx.MockTransport(api)
    if flavour == "sync":
        client = Corral(URL, "key")
        client.api.set_httpx_client(httpx.Client(base_url=URL, transport=mock))
    else:
        client = AsyncCorral(URL, "key")
        client.api.set_async_httpx_client(httpx.AsyncClient(base_url=URL, transport=mock))
    return client


async def done(value):
    """A sync call's result, or an async call's awaited: one scenario serves both flavours."""
    return await value if inspect.isawaitable(value) else value


async def collect(items) -> list:
    if hasattr(items, "__aiter__"):
        return [item async for item in items]
    return list(items)


def scenario(test):
    """Run ``test(corral, api, flavour)`` with a Corral and with an AsyncCorral."""
    @pytest.mark.parametrize("flavour", ["sync", "async"])
    def run(flavour):
        api = FakeApi()
        asyncio.run(test(connected(flavour, api), api, flavour))
    run.__name__, run.__doc__ = test.__name__, test.__doc__
    return run


@scenario
async def test_create_waits_until_running(corral, api, flavour):
    api.on("POST", "/v1/sandboxes", (202, sandbox(state="starting")))
    api.on("GET", "/v1/sandboxes/sb-1", sandbox())
    sb = await done(corral.sandboxes.create("busybox", memory_mb=64, wait_timeout=30))
    assert (type(sb).__name__, sb.id, sb.state) == (("Sandbox" if flavour == "sync" else "AsyncSandbox"), "sb-1",
                                                     "running")
    assert repr(sb) == f"{type(sb).__name__}('sb-1', state='running')"
    assert api.sent() == [("POST", "/v1/sandboxes?wait_for=running&timeout=30"),
                          ("GET", "/v1/sandboxes/sb-1?wait_for=running&timeout=30")]
    assert api.bodies()[0] == {"environment": "busybox", "memory_mb": 64}


@scenario
async def test_create_without_wait_and_a_failed_start(corral, api, flavour):
    api.on("POST", "/v1/sandboxes", (202, sandbox(state="pending")), (202, sandbox("sb-2", "failed", reason="oom")))
    assert (await done(corral.sandboxes.create("busybox", wait=False))).state == "pending"
    with pytest.raises(SandboxFailed) as failed:
        await done(corral.sandboxes.create("busybox"))
    assert (failed.value.sandbox_id, failed.value.state, failed.value.reason, failed.value.status) == (
        "sb-2", "failed", "oom", 409)
    assert api.sent() == [("POST", "/v1/sandboxes?timeout=60.0"), ("POST", "/v1/sandboxes?wait_for=running&timeout=120.0")]


@scenario
async def test_every_sandbox_call(corral, api, flavour):
    api.on("GET", "/v1/sandboxes/sb-1", sandbox())
    api.on("POST", "/v1/sandboxes/sb-1/exec", {"exit_code": 0, "stdout": "hi\n", "stderr": "", "duration_ms": 1.0})
    stream = b'{"type": "stdout", "data": "1\\n"}\n\n{"type": "exit", "result": {"exit_code": 0, "stdout": "", ' \
             b'"stderr": "", "duration_ms": 2.0}}\n'
    api.on("POST", "/v1/sandboxes/sb-1/exec/stream", stream)
    api.on("PUT", "/v1/sandboxes/sb-1/files", {"size": 2})
    api.on("GET", "/v1/sandboxes/sb-1/files", b"hi")
    api.on("GET", "/v1/sandboxes/sb-1/files/list", [{"name": "a", "path": "/home/user/a", "type": "file", "size": 2,
                                                     "mode": 420, "mtime": 1.0}])
    api.on("POST", "/v1/sandboxes/sb-1/pause", sandbox(state="paused"))
    api.on("POST", "/v1/sandboxes/sb-1/resume", sandbox())
    api.on("GET", "/v1/sandboxes/sb-1/screen", b"\x89PNG")
    api.on("POST", "/v1/sandboxes/sb-1/input", {"sent": 1})
    api.on("POST", "/v1/sandboxes/sb-1/snapshot", (201, snapshot()))
    api.on("DELETE", "/v1/sandboxes/sb-1", (202, sandbox(state="stopping")))
    sb = await done(corral.sandboxes.get("sb-1"))
    assert (await done(sb.refresh())) is sb
    assert (await done(sb.exec("echo hi", cwd="/tmp"))).stdout == "hi\n"
    chunks = await collect(sb.exec_stream(["seq", "1"]))
    assert [(c.type, c.data) for c in chunks] == [("stdout", "1\n"), ("exit", None)] and chunks[1].result.duration_ms == 2
    assert await done(sb.write_file("a", "hi")) is None
    assert await done(sb.read_file("a")) == b"hi"
    assert [f.name for f in await done(sb.list_files())] == ["a"]
    assert (await done(sb.pause())).state == "paused" and (await done(sb.resume())).state == "running"
    assert await done(sb.screenshot()) == b"\x89PNG"
    sent = [await done(call) for call in (sb.type_text("ls\n"), sb.press("ctrl", "c"), sb.move_mouse(1, 2),
                                          sb.click(3, 4, "right"), sb.send_input([{"type": "text", "text": "x"}]))]
    assert sent == [1] * 5
    assert (await done(sb.snapshot())).id == "snap-1"
    assert (await done(sb.delete(wait=False))).state == "stopping"
    assert api.sent() == [
        ("GET", "/v1/sandboxes/sb-1?timeout=60.0"), ("GET", "/v1/sandboxes/sb-1?timeout=60.0"),
        ("POST", "/v1/sandboxes/sb-1/exec"), ("POST", "/v1/sandboxes/sb-1/exec/stream"),
        ("PUT", "/v1/sandboxes/sb-1/files?path=a&mode=420"), ("GET", "/v1/sandboxes/sb-1/files?path=a"),
        ("GET", "/v1/sandboxes/sb-1/files/list?path=."), ("POST", "/v1/sandboxes/sb-1/pause"),
        ("POST", "/v1/sandboxes/sb-1/resume"), ("GET", "/v1/sandboxes/sb-1/screen"),
        *[("POST", "/v1/sandboxes/sb-1/input")] * 5, ("POST", "/v1/sandboxes/sb-1/snapshot"),
        ("DELETE", "/v1/sandboxes/sb-1?wait=false&timeout=60.0")]
    bodies = api.bodies()
    assert bodies[2] == {"cmd": "echo hi", "cwd": "/tmp", "env": {}, "timeout_s": 60.0, "user": "user"}
    assert bodies[3]["cmd"] == ["seq", "1"]
    assert api.requests[4].content == b"hi" and api.requests[4].headers["content-type"] == "application/octet-stream"
    assert [b["events"] for b in bodies[10:15]] == [
        [{"type": "text", "text": "ls\n"}], [{"type": "key", "keys": ["ctrl", "c"]}],
        [{"type": "mouse_move", "x": 1, "y": 2}], [{"type": "click", "button": "right", "double": False, "x": 3, "y": 4}],
        [{"type": "text", "text": "x"}]]


@scenario
async def test_exec_output_as_bytes(corral, api, flavour):
    """output_encoding="base64" is sent only when asked; stdout_bytes/stderr_bytes/data_bytes
    give bytes whatever the answer's encoding (none, from an api that predates it: text)."""
    api.on("POST", "/v1/sandboxes/sb-1/exec",
           {"exit_code": 0, "stdout": "//5hYmMK", "stderr": "ww==", "duration_ms": 1.0, "encoding": "base64"},
           {"exit_code": 0, "stdout": "\ufffdé", "stderr": "", "duration_ms": 1.0, "encoding": "utf-8"},
           {"exit_code": 0, "stdout": "old", "stderr": "", "duration_ms": 1.0})
    stream = b'{"type": "stdout", "data": "/w==", "encoding": "base64"}\n' \
             b'{"type": "stdout", "data": "/g==", "encoding": "base64"}\n' \
             b'{"type": "exit", "result": {"exit_code": 0, "stdout": "//4=", "stderr": "", "duration_ms": 2.0, ' \
             b'"encoding": "base64"}}\n'
    api.on("POST", "/v1/sandboxes/sb-1/exec/stream", stream)
    sb = corral.sandboxes._sandbox(corral, SandboxInfo.from_dict(sandbox()))
    raw = await done(sb.exec("printf '\\377\\376abc\\n'", output_encoding="base64"))
    assert (raw.encoding, raw.stdout_bytes, raw.stderr_bytes) == ("base64", b"\xff\xfeabc\n", b"\xc3")
    text = await done(sb.exec("x"))
    assert (text.stdout, text.stdout_bytes) == ("\ufffdé", "\ufffdé".encode())
    assert (await done(sb.exec("x"))).stdout_bytes == b"old"
    chunks = await collect(sb.exec_stream("cat blob", output_encoding="base64"))
    assert [c.data_bytes for c in chunks] == [b"\xff", b"\xfe", None]
    assert chunks[-1].result.stdout_bytes == b"\xff\xfe"
    bodies = api.bodies()
    assert [b.get("output_encoding") for b in bodies] == ["base64", None, None, "base64"]


@scenario
async def test_a_timed_out_streamed_exec_ends_with_its_result(corral, api, flavour):
    """issue 34: the exit chunk of a command that ran out of time has exit_code null (servers
    before the fix left it out: the SDK raised KeyError 'exit_code'); its result reads as
    ``exec``'s does: timed_out, no exit code."""
    timed_out = {"stdout": "", "stderr": "", "duration_ms": 1000.0, "timed_out": True, "truncated": False,
                 "oom_killed": False, "encoding": "utf-8"}
    old_server = json.dumps({"type": "exit", "result": timed_out}).encode() + b"\n"
    new_server = json.dumps({"type": "exit", "result": {"exit_code": None, **timed_out}}).encode() + b"\n"
    api.on("POST", "/v1/sandboxes/sb-1/exec/stream", old_server, new_server)
    sb = corral.sandboxes._sandbox(corral, SandboxInfo.from_dict(sandbox()))
    for _ in range(2):
        (chunk,) = await collect(sb.exec_stream("sleep 5", timeout_s=1))
        assert (chunk.type, chunk.result.exit_code, chunk.result.timed_out) == ("exit", None, True)
    assert [b["timeout_s"] for b in api.bodies()] == [1, 1]


@scenario
async def test_delete_takes_an_id_a_sandbox_or_labels(corral, api, flavour):
    """issue 34: ``corral.sandboxes.delete("sb-…")`` crashed ('str' object has no attribute 'items')."""
    api.on("DELETE", "/v1/sandboxes/sb-1", (202, sandbox(state="terminated")))
    api.on("DELETE", "/v1/sandboxes/sb-2", (202, sandbox("sb-2", "stopping")))
    api.on("DELETE", "/v1/sandboxes", (202, {"items": [sandbox("sb-3", "stopping")]}))
    gone = await done(corral.sandboxes.delete("sb-1"))
    assert (type(gone), gone.id, gone.state) == (corral.sandboxes._sandbox, "sb-1", "terminated")
    sb2 = corral.sandboxes._sandbox(corral, SandboxInfo.from_dict(sandbox("sb-2")))
    assert (await done(corral.sandboxes.delete(sb2, wait=False))) is sb2 and sb2.state == "stopping"
    by_labels = await done(corral.sandboxes.delete(labels={"run": "7"}))
    positional = await done(corral.sandboxes.delete({"run": "7"}))  # the old call form
    assert [sb.id for sb in by_labels] == [sb.id for sb in positional] == ["sb-3"]
    for wrong in ({}, {"sandbox": "sb-1", "labels": {"run": "7"}}):
        with pytest.raises(TypeError):
            await done(corral.sandboxes.delete(**wrong))
    assert api.sent() == [("DELETE", "/v1/sandboxes/sb-1?wait=true&timeout=60.0"),
                          ("DELETE", "/v1/sandboxes/sb-2?wait=false&timeout=60.0"),
                          ("DELETE", "/v1/sandboxes?label=run%3D7"), ("DELETE", "/v1/sandboxes?label=run%3D7")]


@scenario
async def test_read_text_is_read_file_decoded(corral, api, flavour):
    api.on("GET", "/v1/sandboxes/sb-1/files", "héllo\n".encode())
    sb = corral.sandboxes._sandbox(corral, SandboxInfo.from_dict(sandbox()))
    assert await done(sb.read_file("a.txt")) == "héllo\n".encode()  # bytes, as it always was
    assert await done(sb.read_text("a.txt")) == "héllo\n"
    assert api.sent() == [("GET", "/v1/sandboxes/sb-1/files?path=a.txt")] * 2


@scenario
async def test_list_delete_by_labels_and_many(corral, api, flavour):
    api.on("GET", "/v1/sandboxes", {"items": [sandbox("sb-1"), sandbox("sb-2")]})
    api.on("DELETE", "/v1/sandboxes", (202, {"items": [sandbox("sb-2", "stopping")]}))
    api.on("POST", "/v1/sandboxes", *[(202, sandbox(f"sb-{i}")) for i in range(3)])
    api.on("DELETE", "/v1/sandboxes/sb-0", (202, sandbox("sb-0", "stopping")))
    listed = await done(corral.sandboxes.list(labels={"run": "7"}, state="running"))
    assert [sb.id for sb in listed] == ["sb-1", "sb-2"] and {type(sb) for sb in listed} == {corral.sandboxes._sandbox}
    deleted = await done(corral.sandboxes.delete(labels={"run": "7", "keep": "no"}))
    assert [(sb.id, sb.state) for sb in deleted] == [("sb-2", "stopping")]
    many = await done(corral.sandboxes.create_many("busybox", 3, concurrency=2, memory_mb=32))
    assert sorted(sb.id for sb in many) == ["sb-0", "sb-1", "sb-2"]
    assert await done(corral.sandboxes.delete_many([sb for sb in many if sb.id == "sb-0"])) is None
    assert api.sent()[:2] == [("GET", "/v1/sandboxes?label=run%3D7&state=running"),
                              ("DELETE", "/v1/sandboxes?label=run%3D7&label=keep%3Dno")]
    assert api.sent()[-1] == ("DELETE", "/v1/sandboxes/sb-0?wait=false&timeout=60.0")
    assert api.bodies()[2:5] == [{"environment": "busybox", "memory_mb": 32}] * 3


@scenario
async def test_errors_map_to_corral_error(corral, api, flavour):
    api.on("GET", "/v1/sandboxes/sb-x", (404, {"error": {"code": "not_found", "message": "no sandbox sb-x",
                                                           "details": [{"loc": ["path"]}]}}))
    api.on("GET", "/v1/sandboxes/sb-1", (502, b"<html>bad gateway</html>"))
    api.on("POST", "/v1/sandboxes/sb-1/exec/stream", (409, {"error": {"code": "sandbox_paused", "message": "paused"}}))
    with pytest.raises(CorralError) as missing:
        await done(corral.sandboxes.get("sb-x"))
    assert (missing.value.status, missing.value.code, missing.value.message, missing.value.details) == (
        404, "not_found", "no sandbox sb-x", [{"loc": ["path"]}])
    with pytest.raises(CorralError) as gateway:
        await done(corral.sandboxes.get("sb-1"))
    assert (gateway.value.status, gateway.value.code, gateway.value.message) == (502, "error", "<html>bad gateway</html>")
    sb = corral.sandboxes._sandbox(corral, SandboxInfo.from_dict(sandbox()))
    with pytest.raises(CorralError) as paused:
        await collect(sb.exec_stream("true"))
    assert (paused.value.status, paused.value.code) == (409, "sandbox_paused")


@scenario
async def test_jobs(corral, api, flavour):
    job = {"id": "job-1", "count": 2, "counts": {"pending": 2}}
    api.on("POST", "/v1/jobs", (202, job))
    api.on("GET", "/v1/jobs/job-2", {**job, "id": "job-2"})
    api.on("GET", "/v1/jobs/job-1", {**job, "counts": {"running": 1, "pending": 1}},
           {**job, "counts": {"running": 1, "terminated": 1}}, {**job, "counts": {"terminated": 1, "failed": 1}})
    api.on("DELETE", "/v1/jobs/job-1", {**job, "deleted": True})
    created = await done(corral.jobs.create("busybox", count=2, weight=2, labels={"run": "7"}, memory_mb=32))
    assert type(created).__name__ == ("Job" if flavour == "sync" else "AsyncJob")
    assert repr(created) == f"{type(created).__name__}('job-1', count=2, counts={{'pending': 2}})"
    assert api.bodies()[0] == {"spec": {"environment": "busybox", "memory_mb": 32}, "count": 2, "weight": 2,
                               "priority": 0, "labels": {"run": "7"}}
    assert (await done(created.wait(poll_s=0))).ended == 2
    assert (await done(corral.jobs.get("job-1"))).counts == {"terminated": 1, "failed": 1}
    assert (await done(created.delete())).info["deleted"] and (await done(corral.jobs.delete("job-1"))).id == "job-1"
    stuck = await done(corral.jobs.get("job-2"))
    with pytest.raises(TimeoutError):
        await done(stuck.wait(until="running", timeout=-1, poll_s=0))
    assert api.sent()[:5] == [("POST", "/v1/jobs")] + [("GET", "/v1/jobs/job-1")] * 4


@scenario
async def test_rollout_steps_retry_and_replay(corral, api, flavour):
    api.on("POST", "/v1/rollouts", (201, rollout(sandbox_state="running")))
    api.on("POST", "/v1/rollouts/ro-1/steps",
           (503, {"error": {"code": "unavailable", "message": "api restarting"}}),
           httpx.ConnectError("connection refused"),
           step(0, observation={"exit_code": 0, "stdout": "x\n", "stderr": "", "duration_ms": 1.0}),
           step(1, "read_file", replayed=True, observation={"content": "/w==", "encoding": "base64"}),
           step(2, "list_files", status="error", error={"status": 404, "code": "not_found", "message": "gone"}),
           (409, {"error": {"code": "step_mismatch", "message": "index 3 differs"}}))
    api.on("GET", "/v1/rollouts/ro-1", rollout(step_count=3, steps=[step(0), step(1), step(2, status="error")]))
    api.on("GET", "/v1/rollouts", {"items": [rollout()]})
    api.on("POST", "/v1/rollouts/ro-1/finish", rollout(status="finished"))
    with pytest.raises(ValueError):
        await done(corral.rollouts.create(job_id="job-7"))
    r = await done(corral.rollouts.create("busybox", job_id="job-7", metadata={"episode": 3}, memory_mb=64))
    r.retry_timeout = 10
    result = await done(r.exec("echo x"))  # after a 503 and a refused connection
    assert (result.stdout, result.stdout_bytes) == ("x\n", b"x\n")  # the SDK's ExecResult, as from a sandbox
    assert await done(r.read_file("blob")) == b"\xff"
    with pytest.raises(StepFailed) as failed:
        await done(r.list_files())
    assert (failed.value.status, failed.value.code, r.cursor, r.replayed) == (404, "not_found", 3, 1)
    with pytest.raises(CorralError) as mismatch:
        await done(r.write_file("a", b"\xff"))
    assert (mismatch.value.code, r.cursor) == ("step_mismatch", 3)
    assert [s.status for s in await done(r.trajectory())] == ["done", "done", "error"]
    assert (await done(r.refresh())).committed == 3
    attached = await done(corral.rollouts.attach("ro-1"))
    assert (type(attached), attached.cursor, attached.committed) == (type(r), 0, 3)
    assert [x.id for x in await done(corral.rollouts.list(job_id="job-7"))] == ["ro-1"]
    assert (await done(r.finish(reward=1.0, keep_sandbox=True))).status == "finished"
    assert api.sent()[0] == ("POST", "/v1/rollouts?wait=true&timeout=120.0")
    assert api.bodies()[0] == {"job_id": "job-7", "metadata": {"episode": 3},
                               "sandbox": {"environment": "busybox", "memory_mb": 64}}
    steps = [b for (method, url), b in zip(api.sent(), api.bodies()) if url.endswith("/steps")]
    assert [s["index"] for s in steps] == [0, 0, 0, 1, 2, 3]
    assert steps[-1]["args"] == {"path": "a", "content": "/w==", "encoding": "base64", "mode": 420}
    assert api.sent()[-2:] == [("GET", "/v1/rollouts?job_id=job-7"), ("POST", "/v1/rollouts/ro-1/finish")]
    assert api.bodies()[-1] == {"reward": 1.0, "info": {}, "keep_sandbox": True}


@scenario
async def test_snapshots(corral, api, flavour):
    api.on("GET", "/v1/snapshots", {"items": [snapshot()]})
    api.on("GET", "/v1/snapshots/snap-1", snapshot())
    api.on("DELETE", "/v1/snapshots/snap-1", snapshot())
    assert [s.id for s in await done(corral.snapshots.list(sandbox_id="sb-1"))] == ["snap-1"]
    assert (await done(corral.snapshots.get("snap-1"))).node_id == "node-1"
    assert (await done(corral.snapshots.delete("snap-1"))).id == "snap-1"
    assert api.sent() == [("GET", "/v1/snapshots?sandbox_id=sb-1"), ("GET", "/v1/snapshots/snap-1"),
                          ("DELETE", "/v1/snapshots/snap-1")]


# ---- fncall and the transports themselves ------------------------------------------------

@pytest.fixture
def fake_network(monkeypatch):
    api = FakeApi()
    mock = httpx.MockTransport(api)
    monkeypatch.setattr(httpx, "Client", functools.partial(httpx.Client, transport=mock))
    monkeypatch.setattr(httpx, "AsyncClient", functools.partial(httpx.AsyncClient, transport=mock))
    return api


def test_fncall_and_fncall_many(fake_network):
    api = fake_network
    api.on("POST", "/v1/fncall", {"verdict": "accepted"})
    api.on("POST", "/v1/fncall/batch", (202, {"id": "fb-1", "total": 3}))
    api.on("GET", "/v1/fncall/batch/fb-1",
           {"status": "running", "next_offset": 2, "results": [{"index": 1, "result": {"n": 1}},
                                                               {"index": 0, "result": {"n": 0}}]},
           {"status": "done", "next_offset": 3, "results": [{"index": 2, "result": {"n": 2}}]})
    corral = Corral(URL, "key")
    assert fncall("python", "print(1)", client=corral) == {"verdict": "accepted"}
    assert api.requests[0].headers["authorization"] == "Bearer key"
    calls_ = [{"runtime": "bash", "code": f"echo {i}"} for i in range(3)]
    assert asyncio.run(fncall_many(calls_, url=URL, api_key="k2")) == [{"verdict": "accepted"}] * 3
    assert asyncio.run(fncall_many(calls_, batch=True, url=URL, api_key="k2", timeout=7)) == [
        {"n": 0}, {"n": 1}, {"n": 2}]
    assert api.sent()[4:] == [("POST", "/v1/fncall/batch"),
                              ("GET", "/v1/fncall/batch/fb-1?offset=0&limit=10000&wait=true&timeout=7"),
                              ("GET", "/v1/fncall/batch/fb-1?offset=2&limit=10000&wait=true&timeout=7")]
    assert api.bodies()[4] == {"calls": [fncall_body(**c) for c in calls_]}
    assert {r.headers["authorization"] for r in api.requests[1:]} == {"Bearer k2"}


def test_fncall_many_batch_that_does_not_finish(fake_network):
    fake_network.on("POST", "/v1/fncall/batch", (202, {"id": "fb-1"}))
    fake_network.on("GET", "/v1/fncall/batch/fb-1", {"status": "running", "next_offset": 0, "results": []})
    with pytest.raises(CorralError) as late:
        asyncio.run(fncall_many([{"runtime": "bash", "code": "sleep 9"}], batch=True, url=URL, api_key="k"))
    assert (late.value.status, late.value.code) == (504, "timeout")


def test_both_transports_run_one_operation_the_same_way():
    api = FakeApi().on("GET", "/n", {"n": 1}).on("GET", "/boom", (500, {"error": {"code": "internal", "message": "x"}}))
    closed = []

    def operation():
        try:
            first = yield calls.Call("GET", "/n", lambda r: r.json()["n"])
            yield Sleep(0)
            pair = yield Concurrently([calls.Call("GET", "/n", lambda r: r.json()["n"] + 1), add_one(first)], 1)
            try:
                yield calls.Call("GET", "/boom", lambda r: None)
            except CorralError as error:
                return [first, *pair, error.code]
        finally:
            closed.append(True)

    def add_one(n):
        return n + (yield calls.Call("GET", "/n", lambda r: r.json()["n"]))

    http = httpx.Client(base_url=URL, transport=httpx.MockTransport(api))
    sync = SyncTransport(lambda: http)
    assert sync.run(operation()) == [1, 2, 2, "internal"]

    async def run_async():
        async with httpx.AsyncClient(base_url=URL, transport=httpx.MockTransport(api)) as http:
            return await AsyncTransport(lambda: http).run(operation())

    assert asyncio.run(run_async()) == [1, 2, 2, "internal"]
    assert closed == [True, True]
    with pytest.raises(TypeError):
        sync.run(iter_yielding_nonsense())


def iter_yielding_nonsense():
    yield "not a step"


@scenario
async def test_admin_tenants_keys_and_usage(corral, api, flavour):
    tenant = {"name": "team-a", "created_at": T0, "disabled": False, "quotas": {"max_sandboxes": 3}}
    key = {"id": "key-1", "tenant": "team-a", "name": "ci", "role": "tenant", "prefix": "ck_abc",
           "created_at": T0, "revoked_at": None}
    api.on("GET", "/v1/admin/tenants", {"tenants": [tenant]})
    api.on("POST", "/v1/admin/tenants", (201, tenant))
    api.on("PATCH", "/v1/admin/tenants/team-a", tenant)
    api.on("GET", "/v1/admin/keys", {"keys": [key]})
    api.on("POST", "/v1/admin/keys", (201, {**key, "key": "ck_secret"}))
    api.on("POST", "/v1/admin/keys/key-1/rotate", {**key, "id": "key-2", "key": "ck_new", "replaces": "key-1"})
    api.on("DELETE", "/v1/admin/keys/key-2", {**key, "id": "key-2", "revoked_at": T0})
    api.on("GET", "/v1/usage", {"tenant": "t", "current": {}, "totals": {}})
    api.on("GET", "/v1/admin/tenants/nobody", (404, {"error": {"code": "tenant_not_found", "message": "no",
                                                               "details": [{"loc": ["path", "name"], "msg": "no"}]}}))
    assert await done(corral.admin.tenants.list()) == [tenant]
    assert (await done(corral.admin.tenants.create("team-a", max_sandboxes=3)))["name"] == "team-a"
    await done(corral.admin.tenants.update("team-a", disabled=True, max_cpu=None))
    assert await done(corral.admin.keys.list("team-a")) == [key]
    assert (await done(corral.admin.keys.create("team-a", name="ci")))["key"] == "ck_secret"
    assert (await done(corral.admin.keys.rotate("key-1")))["replaces"] == "key-1"
    assert (await done(corral.admin.keys.revoke("key-2")))["revoked_at"] == T0
    assert (await done(corral.usage()))["tenant"] == "t"
    with pytest.raises(CorralError) as info:
        await done(corral.admin.tenants.get("nobody"))
    assert (info.value.status, info.value.code) == (404, "tenant_not_found")
    with pytest.raises(TypeError, match="max_gpus"):
        await done(corral.admin.tenants.create("team-b", max_gpus=1))
    assert api.bodies()[1:3] == [{"name": "team-a", "quotas": {"max_sandboxes": 3}},
                                 {"quotas": {"max_cpu": None}, "disabled": True}]
    assert api.sent()[3] == ("GET", "/v1/admin/keys?tenant=team-a")
    assert api.bodies()[4] == {"tenant": "team-a", "name": "ci", "role": "tenant"}


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_job_wait_with_progress_draws_a_bar_on_stderr(flavour, capsys):
    """issue 34: progress=True drew nothing unless tqdm happened to be installed (it is not in
    the venv `make up` makes); the bar is rich's, which the SDK installs anyway."""
    api = FakeApi()
    info = {"id": "job-1", "count": 2, "counts": {"pending": 2}}
    api.on("GET", "/v1/jobs/job-1", {**info, "counts": {"running": 2}}, {**info, "counts": {"terminated": 2}})
    corral = connected(flavour, api)
    job = corral.jobs._job(corral, info)
    assert asyncio.run(done(job.wait(poll_s=0, progress=True))).ended == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "job-1" in captured.err and "2/2" in captured.err
