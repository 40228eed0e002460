"""The unchanged E2B SDK (e2b 2.64.0 from PyPI, requirements-dev.txt) drives Corral sandboxes:
both planes point at the api (E2B_API_URL = E2B_SANDBOX_URL), the key is a Corral API key of
E2B's form. Sync and async clients; container sandboxes on the live platform."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.live_platform import E2B_API_KEY, OTHER_TENANT_KEY
from tests.polling import until, until_sync

e2b = pytest.importorskip("e2b", reason="e2b SDK not installed (pip install -r requirements-dev.txt)")
from e2b import AsyncSandbox, CommandExitException, Sandbox, SandboxQuery, SandboxState  # noqa: E402
from e2b.exceptions import NotFoundException, SandboxException  # noqa: E402


@pytest.fixture(scope="module")
def e2b_env(platform):
    saved = {k: os.environ.get(k) for k in ("E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DEBUG")}
    os.environ.update(E2B_API_KEY=E2B_API_KEY, E2B_API_URL=platform["api"], E2B_SANDBOX_URL=platform["api"])
    os.environ.pop("E2B_DEBUG", None)
    yield platform
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_commands_files_list_timeout_and_kill(e2b_env):
    sbx = Sandbox.create(envs={"FOO": "from-create"}, metadata={"suite": "e2b-sync", "run": str(time.time())},
                         timeout=120)
    try:
        assert sbx.is_running()
        # envVars are every process's default environment; a command's envs win over them.
        assert sbx.commands.run("echo $FOO").stdout == "from-create\n"
        assert sbx.commands.run("echo $FOO $BAR", envs={"FOO": "mine", "BAR": "b"}).stdout == "mine b\n"
        assert sbx.commands.run("pwd").stdout.strip() == "/home/user"
        assert sbx.commands.run("id -u", user="root").stdout.strip() == "0"
        with pytest.raises(CommandExitException) as failed:
            sbx.commands.run("echo out; echo err >&2; exit 3")
        assert (failed.value.exit_code, failed.value.stdout, failed.value.stderr) == (3, "out\n", "err\n")

        # Output arrives while the command runs, in order.
        seen: list[str] = []
        result = sbx.commands.run("for i in 1 2 3; do echo line$i; sleep 0.2; done", on_stdout=seen.append)
        assert "".join(seen) == result.stdout == "line1\nline2\nline3\n"

        # Background commands outlive their request; list, wait and kill reach them by pid.
        quick = sbx.commands.run("sleep 0.5; echo done", background=True)
        slow = sbx.commands.run("sleep 600", background=True)
        assert {quick.pid, slow.pid} <= {p.pid for p in sbx.commands.list()}
        assert quick.wait().stdout == "done\n"
        assert slow.kill() is True
        with pytest.raises(CommandExitException):
            slow.wait()
        until_sync(lambda: slow.pid not in {p.pid for p in sbx.commands.list()}, 10, "killed process gone")
        assert sbx.commands.kill(slow.pid) is False

        # Standard input, and a second client re-attaching to a running process by pid.
        reader = sbx.commands.run("read a; echo got:$a; read b; echo got:$b", background=True, stdin=True)
        sbx.commands.send_stdin(reader.pid, "one\n")
        attached = sbx.commands.connect(reader.pid)
        sbx.commands.send_stdin(reader.pid, "two\n")
        assert "got:two\n" in attached.wait().stdout
        assert reader.wait().stdout == "got:one\ngot:two\n"
        cat = sbx.commands.run("cat", background=True, stdin=True)
        sbx.commands.send_stdin(cat.pid, "abc")
        sbx.commands.close_stdin(cat.pid)
        assert cat.wait().stdout == "abc"

        # Files: write (multipart, multi-file), read, list, exists, make_dir, rename, remove.
        info = sbx.files.write("notes/a.txt", "hello")
        assert info.path == "/home/user/notes/a.txt"
        assert sbx.files.read("/home/user/notes/a.txt") == "hello"
        assert sbx.files.read("notes/a.txt", format="bytes") == b"hello"
        sbx.files.write_files([{"path": "/tmp/m/one", "data": "1"}, {"path": "/tmp/m/two", "data": b"22"}])
        assert sorted((e.name, e.size) for e in sbx.files.list("/tmp/m")) == [("one", 1), ("two", 2)]
        assert sbx.commands.run("cat /tmp/m/one /tmp/m/two").stdout == "122"
        assert sbx.files.exists("/tmp/m/one") and not sbx.files.exists("/tmp/m/three")
        assert sbx.files.make_dir("/tmp/m/deep/er") is True
        assert sbx.files.make_dir("/tmp/m/deep/er") is False
        assert {e.path for e in sbx.files.list("/tmp/m", depth=2)} >= {"/tmp/m/deep", "/tmp/m/deep/er"}
        moved = sbx.files.rename("/tmp/m/one", "/tmp/m/deep/uno")
        assert moved.path == "/tmp/m/deep/uno" and sbx.files.read("/tmp/m/deep/uno") == "1"
        sbx.files.remove("/tmp/m/deep")
        assert not sbx.files.exists("/tmp/m/deep")
        with pytest.raises(NotFoundException):
            sbx.files.read("/tmp/m/deep/uno")

        # Listing filters by state and metadata.
        run_id = sbx.get_info().metadata["run"]
        listed = Sandbox.list(query=SandboxQuery(metadata={"run": run_id}, state=[SandboxState.RUNNING])).next_items()
        assert [s.sandbox_id for s in listed] == [sbx.sandbox_id]
        assert Sandbox.list(query=SandboxQuery(metadata={"run": "nope"})).next_items() == []

        # set_timeout overwrites the deadline.
        sbx.set_timeout(600)
        assert sbx.get_info().end_at.timestamp() > time.time() + 500
    finally:
        assert sbx.kill() is True
    assert not sbx.is_running()
    assert Sandbox.kill(sbx.sandbox_id) is False
    with pytest.raises(SandboxException):  # SandboxNotFoundException
        Sandbox.connect(sbx.sandbox_id)
    with pytest.raises(SandboxException):  # envd: 502 "sandbox was not found"
        sbx.commands.run("true")


def test_other_tenants_cannot_see_or_touch_it(e2b_env):
    sbx = Sandbox.create(timeout=60)
    try:
        with pytest.raises(SandboxException):
            Sandbox.connect(sbx.sandbox_id, api_key=OTHER_TENANT_KEY)
        assert Sandbox.kill(sbx.sandbox_id, api_key=OTHER_TENANT_KEY) is False
        assert sbx.sandbox_id not in {s.sandbox_id for s in Sandbox.list(api_key=OTHER_TENANT_KEY).next_items()}
        assert sbx.commands.run("echo still").stdout == "still\n"
    finally:
        sbx.kill()


def test_pause_then_connect_resumes(e2b_env):
    sbx = Sandbox.create(timeout=120)
    try:
        sbx.files.write("/tmp/kept", "state")
        assert sbx.pause() is True
        assert not sbx.is_running()
        assert Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()[0].sandbox_id == sbx.sandbox_id
        resumed = Sandbox.connect(sbx.sandbox_id)
        assert resumed.commands.run("cat /tmp/kept").stdout == "state"
    finally:
        sbx.kill()


def test_deadline_reaper_kills_an_expired_sandbox(e2b_env):
    sbx = Sandbox.create(timeout=2)
    until_sync(lambda: not sbx.is_running(), 30, "expired sandbox killed")
    assert Sandbox.kill(sbx.sandbox_id) is False


def test_async_client(e2b_env):
    async def scenario():
        sbx = await AsyncSandbox.create(envs={"X": "1"}, timeout=120)
        try:
            assert (await sbx.commands.run("echo $X")).stdout == "1\n"
            handle = await sbx.commands.run("echo bg; sleep 0.3", background=True)
            assert (await handle.wait()).stdout == "bg\n"
            await sbx.files.write("/tmp/async.txt", b"bytes")
            assert await sbx.files.read("/tmp/async.txt") == "bytes"
            assert [e.name for e in await sbx.files.list("/tmp") if e.name == "async.txt"] == ["async.txt"]
            chunks: list[str] = []
            await sbx.commands.run("echo a; sleep 0.2; echo b", on_stdout=chunks.append)
            assert "".join(chunks) == "a\nb\n"
        finally:
            assert await sbx.kill() is True
        await until(lambda: _not_running(sbx), 10, "killed")

    async def _not_running(sbx):
        return not await sbx.is_running()

    asyncio.run(scenario())


def _code_interpreter_sandbox():
    """An ``e2b_code_interpreter`` sandbox (template code-interpreter-v1 → the judge
    environment, which has python3); skipped where the platform registered no such environment."""
    from e2b_code_interpreter import Sandbox as CodeSandbox

    try:
        return CodeSandbox.create(timeout=300)
    except SandboxException as exc:
        if "unknown environment" in str(exc):
            pytest.skip(f"no python environment registered for code-interpreter-v1: {exc}")
        raise


def test_code_interpreter_keeps_state_between_cells(e2b_env):
    sbx = _code_interpreter_sandbox()
    try:
        first = sbx.run_code("x = 41\nprint('hello')\nx + 1")
        assert first.logs.stdout == ["hello\n"] and first.text == "42" and first.error is None
        streamed: list[str] = []
        assert sbx.run_code("x += 1\nprint(x)", on_stdout=lambda m: streamed.append(m.line)).logs.stdout == ["42\n"]
        assert streamed == ["42\n"]
        failed = sbx.run_code("1 / 0")
        assert failed.error.name == "ZeroDivisionError" and "division by zero" in failed.error.value
        assert "Traceback" in failed.error.traceback
        # A traceback starts at the user's code, with its lines (also of a function an earlier
        # cell defined), never in the kernel's driver; a SyntaxError shows the user's line.
        sbx.run_code("def half(n):\n    return n / 0")
        deep = sbx.run_code("y = 2\nhalf(y)").error.traceback
        assert "<string>" not in deep and deep.index("half(y)") < deep.index("return n / 0"), deep
        syntax = sbx.run_code("x = (1,\nprint(x")
        assert syntax.error.name == "SyntaxError" and "<string>" not in syntax.error.traceback
        assert "ast.parse" not in syntax.error.traceback and "print(x" in syntax.error.traceback, syntax.error.traceback
        assert sbx.run_code("import os; os.environ['K']", envs={"K": "v"}).text == "'v'"

        # Contexts are separate namespaces; restart forgets, delete ends.
        other = sbx.create_code_context(cwd="/tmp")
        assert sbx.run_code("import os; os.getcwd()", context=other).text == "'/tmp'"
        assert sbx.run_code("x", context=other).error.name == "NameError"
        assert sbx.run_code("x").text == "42"
        assert other.id in {c.id for c in sbx.list_code_contexts()}
        sbx.restart_code_context(other)
        assert sbx.run_code("y = 1; y", context=other).text == "1"
        sbx.remove_code_context(other)
        assert other.id not in {c.id for c in sbx.list_code_contexts()}
        # The same sandbox still takes ordinary commands.
        assert sbx.commands.run("python3 -c 'print(6*7)'").stdout == "42\n"
    finally:
        sbx.kill()


def test_code_interpreter_without_python_fails_at_once_saying_why(e2b_env):
    """Template ``base`` is busybox: no python3. A cell fails within seconds, naming python3,
    instead of waiting out its timeout."""
    from e2b_code_interpreter import Sandbox as CodeSandbox

    sbx = CodeSandbox.create(template="base", timeout=120)
    try:
        started = time.monotonic()
        with pytest.raises(Exception) as failed:  # the SDK's own exception for an error answer
            sbx.run_code("print(1)", timeout=90)
        assert time.monotonic() - started < 20
        assert "python3" in str(failed.value), failed.value
        # The sandbox is fine for commands, and a second cell says the same.
        assert sbx.commands.run("echo ok").stdout == "ok\n"
        with pytest.raises(Exception, match="python3"):
            sbx.run_code("print(1)", timeout=90)
    finally:
        sbx.kill()


def test_metrics_root_home_and_unknown_routes_in_e2b_shape(e2b_env, corral):
    import httpx

    sbx = Sandbox.create(timeout=120)
    try:
        sbx.commands.run("head -c 3000000 /dev/urandom > blob && sync")
        metrics = sbx.get_metrics()
        assert len(metrics) == 1, metrics
        point = metrics[0]
        info = corral.sandboxes.get(sbx.sandbox_id).info
        assert point.cpu_count >= 1 and 0 <= point.cpu_used_pct <= 100
        assert point.mem_total > 0 and 0 < point.mem_used <= point.mem_total
        assert point.disk_total > 0 and 3_000_000 <= point.disk_used <= point.disk_total
        assert point.mem_total == info.memory_mb * 1024 * 1024 and point.disk_total == info.disk_mb * 1024 * 1024
        # A command run as root gets root's home, as in E2B.
        assert sbx.commands.run("echo $HOME", user="root").stdout == "/root\n"
        assert sbx.commands.run("echo $HOME").stdout == "/home/user\n"

        api, headers = e2b_env["api"], {"X-API-Key": E2B_API_KEY}
        for method, path, extra in (("GET", "/templates", {}), ("POST", "/v2/templates/x/builds", {}),
                                    ("GET", f"/sandboxes/{sbx.sandbox_id}/logs", {}),
                                    ("PUT", f"/sandboxes/{sbx.sandbox_id}/network", {}),
                                    ("GET", "/envs", {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983"})):
            answer = httpx.request(method, api + path, headers={**headers, **extra}, timeout=10)
            body = answer.json()
            assert answer.status_code in (404, 405) and set(body) >= {"code", "message"}, (path, body)
            assert body["code"] == answer.status_code and "not supported" in body["message"], (path, body)
        # Corral's own routes keep Corral's shape.
        own = httpx.get(api + "/v1/nope", headers={"Authorization": f"Bearer {e2b_env['api_key']}"}, timeout=10)
        assert own.status_code == 404 and own.json()["error"]["code"] == "not_found"

        # Bad input to the new routes is a 4xx in each surface's shape; another tenant sees nothing.
        metrics_url = f"{api}/sandboxes/{sbx.sandbox_id}/metrics"
        for query in ("start=abc", "start=-1", "end=99999999999999999999", "start=%00"):
            bad = httpx.get(f"{metrics_url}?{query}", headers=headers, timeout=10)
            body = bad.json()
            assert bad.status_code in (400, 422) and body["code"] == bad.status_code and body["message"], (query, body)
        other = {"X-API-Key": OTHER_TENANT_KEY}
        assert httpx.get(metrics_url, headers=other, timeout=10).json()["code"] == 404
        mine = {"Authorization": f"Bearer {e2b_env['api_key']}"}
        theirs = {"Authorization": f"Bearer {OTHER_TENANT_KEY}"}
        usage_url = f"{api}/v1/sandboxes/{sbx.sandbox_id}/usage"
        assert httpx.get(usage_url, headers=mine, timeout=10).json()["disk_used_bytes"] >= 3_000_000
        assert httpx.get(usage_url, headers=theirs, timeout=10).status_code == 404
        for sandbox_id in ("sb-\x01", "sb-\ud800", "sb-" + "x" * 5000):  # (".." is resolved by the client)
            weird = httpx.get(f"{api}/v1/sandboxes/{quote(sandbox_id, safe='', errors='surrogatepass')}/usage", headers=mine, timeout=10)
            assert 400 <= weird.status_code < 500 and "error" in weird.json(), (sandbox_id, weird.text)
    finally:
        sbx.kill()


def test_http_ingress_to_a_server_inside_the_sandbox(e2b_env):
    """A web server in the sandbox (busybox httpd on its own loopback) answers through the
    public API and through E2B's header routing; the sandbox still has no network."""
    import httpx

    api, key = e2b_env["api"], e2b_env["api_key"]
    sbx = Sandbox.create(timeout=120)
    try:
        sbx.files.write("/tmp/www/index.html", "served from inside")
        server = sbx.commands.run("httpd -f -p 127.0.0.1:8080 -h /tmp/www", background=True)
        url = f"{api}/v1/sandboxes/{sbx.sandbox_id}/ports/8080"
        auth = {"Authorization": f"Bearer {key}"}
        page = until_sync(lambda: _get(httpx, f"{url}/index.html", auth), 20, "httpd answers")
        assert page.text == "served from inside"
        assert _get(httpx, f"{url}/missing.html", auth).status_code == 404  # the app's own 404
        routed = httpx.get(f"{api}/index.html", headers={"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8080",
                                                         "E2B-Traffic-Access-Token": sbx.traffic_access_token})
        assert (routed.status_code, routed.text) == (200, "served from inside")
        # Credentials decide: no key, another tenant's key, a wrong traffic token.
        assert httpx.get(f"{url}/index.html").status_code == 401
        assert httpx.get(f"{url}/index.html", headers={"Authorization": f"Bearer {OTHER_TENANT_KEY}"}).status_code == 404
        assert httpx.get(f"{api}/index.html", headers={"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8080",
                                                       "E2B-Traffic-Access-Token": "wrong"}).status_code == 502
        closed = httpx.get(f"{api}/v1/sandboxes/{sbx.sandbox_id}/ports/9/x", headers=auth)
        assert closed.status_code == 502 and "not open" in closed.json()["error"]["message"]
        # Still no way out of the sandbox.
        assert sbx.commands.run("wget -T 2 -q -O- http://1.1.1.1/ || echo unreachable").stdout.strip().endswith(
            "unreachable")
        server.kill()
    finally:
        sbx.kill()


def _get(httpx, url, headers):
    response = httpx.get(url, headers=headers, timeout=10)
    return response if response.status_code != 502 else None


def test_microvm_sandbox_through_e2b(e2b_env, vm_platform, corral):
    """Metadata asks for a hardware boundary: the same SDK calls drive a QEMU microVM."""
    sbx = Sandbox.create(metadata={"corral.isolation": "vm"}, timeout=300)
    try:
        assert corral.sandboxes.get(sbx.sandbox_id).info.backend == "microvm"
        assert sbx.commands.run("echo from the guest").stdout == "from the guest\n"
        sbx.files.write("/tmp/vm.txt", "inside the vm")
        assert sbx.files.read("/tmp/vm.txt") == "inside the vm"
        background = sbx.commands.run("sleep 300", background=True)
        assert background.pid in {p.pid for p in sbx.commands.list()}
        assert background.kill() is True
    finally:
        assert sbx.kill() is True
    assert not sbx.is_running()


# An older 2.x SDK, where the paths differ (POST /sandboxes, /sandboxes/{id}/connect): it pins
# the same package as requirements-dev.txt, so it lives in its own venv (built once, cached).
OLD_E2B = "e2b==2.20.0"
OLD_E2B_VENV = Path(os.environ.get("CORRAL_TEST_VENV_DIR", "/var/cache/corral/test-venvs")) / OLD_E2B.replace("==", "-")
OLD_SDK_SCRIPT = """
import json, sys
from e2b import Sandbox
sbx = Sandbox.create(envs={"OLD": "sdk"}, metadata={"suite": "old"}, timeout=120)
out = {"echo": sbx.commands.run("echo $OLD").stdout}
sbx.files.write("/tmp/old.txt", "v1 paths")
out["read"] = sbx.files.read("/tmp/old.txt")
again = Sandbox.connect(sbx.sandbox_id)
out["connected"] = again.commands.run("cat /tmp/old.txt").stdout
out["listed"] = sbx.sandbox_id in [s.sandbox_id for s in Sandbox.list().next_items()]
out["killed"] = sbx.kill()
out["running_after"] = sbx.is_running()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def old_e2b_python() -> str:
    python = OLD_E2B_VENV / "bin/python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(OLD_E2B_VENV)], check=True)
        install = subprocess.run([str(OLD_E2B_VENV / "bin/pip"), "install", "-q", OLD_E2B], capture_output=True,
                                 text=True)
        if install.returncode != 0:
            shutil.rmtree(OLD_E2B_VENV, ignore_errors=True)
            pytest.skip(f"cannot install {OLD_E2B} (no package index?): {install.stderr[-500:]}")
    return str(python)


def test_older_sdk_with_v1_paths(e2b_env, old_e2b_python):
    env = {**os.environ, "PYTHONPATH": ""}
    run = subprocess.run([old_e2b_python, "-c", OLD_SDK_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {
        "echo": "sdk\n", "read": "v1 paths", "connected": "v1 paths", "listed": True, "killed": True,
        "running_after": False}


def test_uploads_timeouts_resources_and_bad_input(e2b_env):
    import io

    import httpx
    from e2b.exceptions import TimeoutException

    api = e2b_env["api"]
    sbx = Sandbox.create(timeout=120)
    try:
        # octet-stream (a file-like object) and gzip uploads (envd >= 0.5.7 paths of the SDK).
        sbx.files.write("/tmp/raw.bin", io.BytesIO(b"\x00\x01raw"))
        assert sbx.files.read("/tmp/raw.bin", format="bytes") == b"\x00\x01raw"
        sbx.files.write("/tmp/zipped.txt", "compressed on the wire" * 100, gzip=True)
        assert sbx.files.read("/tmp/zipped.txt") == "compressed on the wire" * 100
        # connect-timeout-ms is the process's lifetime: the command is killed at it.
        with pytest.raises(TimeoutException):
            sbx.commands.run("sleep 30; echo late > /tmp/late", timeout=1)
        until_sync(lambda: not any("sleep 30" in str(p.args) for p in sbx.commands.list()), 10, "timed-out command gone")
        assert not sbx.files.exists("/tmp/late")
        info = sbx.get_info()
        assert (info.cpu_count, info.memory_mb) == (1, 256)

        envd = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983",
                "X-Access-Token": sbx.connection_config.sandbox_headers["X-Access-Token"]}
        # Bad input: JSON 4xx saying what was wrong, nothing changed, never a 5xx.
        key = {"X-API-Key": E2B_API_KEY}
        bad = httpx.post(f"{api}/v2/sandboxes", headers=key, content=b"{not json")
        assert bad.status_code == 400 and isinstance(bad.json()["message"], str) and bad.json()["code"] == 400
        unknown = httpx.post(f"{api}/v2/sandboxes", headers=key, json={"templateID": "no-such-template"})
        assert unknown.status_code == 422 and "unknown environment" in unknown.json()["message"]
        assert httpx.post(f"{api}/v2/sandboxes", headers=key, json={"timeout": -5}).status_code == 400
        assert httpx.get(f"{api}/v2/sandboxes?state=sleeping", headers=key).status_code == 400
        assert httpx.get(f"{api}/v2/sandboxes").status_code == 401
        truncated = httpx.post(f"{api}/process.Process/Start", headers={**envd, "content-type": "application/connect+json"},
                               content=b"\x00\x00\x00\x01\x00{}")
        assert truncated.status_code == 200 and b'"invalid_argument"' in truncated.content
        unary = httpx.post(f"{api}/filesystem.Filesystem/Stat", headers=envd, content=b"[1]")
        assert unary.status_code == 400 and unary.json()["code"] == "invalid_argument"
        assert httpx.post(f"{api}/process.Process/Update", headers=envd, content=b"{}").status_code == 501
        assert httpx.post(f"{api}/files", headers=envd, content=b"x").status_code == 400  # no path
        assert httpx.get(f"{api}/files?path=/tmp", headers=envd).status_code == 400  # a directory
        wrong = httpx.get(f"{api}/health", headers={**envd, "X-Access-Token": "0" * 32})
        assert wrong.status_code == 502 and "was not found" in wrong.json()["message"]
        assert sbx.commands.run("echo unharmed").stdout == "unharmed\n"
    finally:
        sbx.kill()


# A WebSocket echo server on the standard library only (the judge environment has python3
# and nothing else): answers each text or binary message with b"echo:" + it.
WS_ECHO_SERVER = r'''
import base64, hashlib, socket, struct
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 8765))
srv.listen()
while True:
    conn, _ = srv.accept()
    head = b""
    while b"\r\n\r\n" not in head:
        head += conn.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key")][0]
    accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    def exactly(n):
        data = b""
        while len(data) < n:
            data += conn.recv(n - len(data))
        return data
    while True:
        first, second = exactly(2)
        opcode, length = first & 15, second & 127
        if length == 126:
            length = struct.unpack(">H", exactly(2))[0]
        mask = exactly(4)
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(exactly(length)))
        if opcode == 8:
            conn.close()
            break
        reply = b"echo:" + payload
        conn.sendall(bytes([0x80 | opcode, len(reply)]) + reply)
'''


def test_websocket_ingress(e2b_env):
    from websockets.sync.client import connect

    try:
        sbx = Sandbox.create(template="judge", timeout=120)
    except SandboxException as exc:
        pytest.skip(f"no judge environment (python3) registered: {exc}")
    try:
        sbx.files.write("/tmp/ws_echo.py", WS_ECHO_SERVER)
        sbx.commands.run("python3 /tmp/ws_echo.py", background=True)
        url = e2b_env["api"].replace("http", "ws", 1) + f"/v1/sandboxes/{sbx.sandbox_id}/ports/8765/echo"

        def opened():
            try:
                return connect(url, additional_headers={"Authorization": f"Bearer {e2b_env['api_key']}"},
                               proxy=None, open_timeout=5)
            except Exception:  # noqa: BLE001 - the server is still starting
                return None

        ws = until_sync(opened, 20, "WebSocket server answers")
        with ws:
            ws.send("hello")
            assert ws.recv(timeout=10) == "echo:hello"
            ws.send(b"\x00\x01")
            assert ws.recv(timeout=10) == b"echo:\x00\x01"
        # E2B's header routing reaches the same server.
        routed = connect(e2b_env["api"].replace("http", "ws", 1) + "/echo", proxy=None, open_timeout=5,
                         additional_headers={"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8765",
                                             "E2B-Traffic-Access-Token": sbx.traffic_access_token})
        with routed:
            routed.send("via headers")
            assert routed.recv(timeout=10) == "echo:via headers"
        with pytest.raises(Exception):  # noqa: B017 - refused handshake (no key) closes the socket
            with connect(url, proxy=None, open_timeout=5) as anonymous:
                anonymous.recv(timeout=5)
    finally:
        sbx.kill()
