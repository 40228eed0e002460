"""Node-agent logic that needs neither root nor crun."""

import asyncio
import base64
import hashlib
import os

import httpx
import pytest

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.images import EnvironmentLayer
from corral_common.contracts.sandboxes import SandboxSpec
from corral_node_agent.backends import paths
from corral_node_agent.backends.base import ExitReason
from corral_node_agent.backends.container import exec as exec_process
from corral_node_agent.backends.container import files, oci
from corral_node_agent.backends.fake import FakeBackend
from corral_node_agent.backends.types import RootFs
from corral_node_agent.errors import BadInput, Conflict, EnvironmentNotFound, ImageUnavailable, NotFound, StartFailed
from corral_node_agent.http_errors import http_error
from corral_node_agent.isolation.identity import container_identity
from corral_node_agent.isolation.policy import policy_for
from corral_node_agent.layers import LayerCache
from corral_node_agent.output import CappedPipe, OutputEncoder, encode_output
from corral_node_agent.sandboxes.service import SandboxManager
from corral_node_agent.settings import NodeAgentSettings
from tests.unit.node_agent import oci_config

# ---- settings -------------------------------------------------------------------------


def test_settings_env_names(monkeypatch):
    monkeypatch.setenv("CORRAL_REDIS_URL", "redis://shared:1/0")
    monkeypatch.setenv("CORRAL_INTERNAL_TOKEN", "tok")
    monkeypatch.setenv("CORRAL_NODE_ID", "node-7")
    monkeypatch.setenv("CORRAL_NODE_PORT", "9100")
    monkeypatch.setenv("CORRAL_NODE_CPU_CAPACITY", "3.5")
    monkeypatch.setenv("CORRAL_PORT", "1")  # another service's setting must not leak in
    s = NodeAgentSettings()
    assert (s.redis_url, s.internal_token, s.node_id, s.port, s.cpu_capacity) == (
        "redis://shared:1/0", "tok", "node-7", 9100, 3.5)
    assert s.state_dir == "/var/lib/corral/node-7"
    assert (s.sandbox_uid, s.sandbox_gid) == (1000, 1000)


def test_settings_defaults_and_overrides(monkeypatch):
    for k in list(os.environ):
        if k.startswith("CORRAL_"):
            monkeypatch.delenv(k)
    s = NodeAgentSettings()
    assert s.node_id == "node-1" and s.state_dir == "/var/lib/corral/node-1"
    # No hidden multiplier: unset capacities are the host's share, overcommit an explicit ratio.
    assert (s.cpu_capacity, s.memory_capacity_mb, s.pids_capacity, s.host_share) == (None, None, None, 1.0)
    assert (s.cpu_overcommit, s.memory_overcommit) == (8.0, 1.0)
    assert (s.max_sandboxes, s.output_limit_bytes, s.sandbox_user) == (0, 1048576, "1000:1000")  # 0: derived (capacity)
    monkeypatch.setenv("CORRAL_NODE_NODE_ID", "alt")
    monkeypatch.setenv("CORRAL_NODE_REDIS_URL", "redis://node-only")
    monkeypatch.setenv("CORRAL_REDIS_URL", "redis://shared")
    s = NodeAgentSettings()
    assert s.node_id == "alt" and s.redis_url == "redis://node-only"
    assert NodeAgentSettings(node_id="kw", state_dir="/x").node_id == "kw"
    with pytest.raises(ValueError):
        NodeAgentSettings(sandbox_user="user")



def test_the_advertised_url_defaults_to_host_and_port_and_can_be_set(monkeypatch):
    for k in list(os.environ):
        if k.startswith("CORRAL_"):
            monkeypatch.delenv(k)
    assert NodeAgentSettings(host="node-a", port=9100).url == "http://node-a:9100"
    monkeypatch.setenv("CORRAL_NODE_HOST", "0.0.0.0")
    monkeypatch.setenv("CORRAL_NODE_ADVERTISE_URL", "https://10.0.3.7:8443/")
    s = NodeAgentSettings()
    assert (s.host, s.url) == ("0.0.0.0", "https://10.0.3.7:8443")
    for bad in ("10.0.3.7:8100", "ftp://h", "http://", "http://h:1/?x=1"):
        with pytest.raises(ValueError, match="advertise_url"):
            NodeAgentSettings(advertise_url=bad)

def test_layer_settings_come_from_the_node_settings(monkeypatch):
    for k in list(os.environ):
        if k.startswith("CORRAL_"):
            monkeypatch.delenv(k)
    layers = NodeAgentSettings(node_id="n").layers()
    assert (layers.state_dir, layers.image_service_url, layers.internal_token) == (
        "/var/lib/corral/n", "http://127.0.0.1:8002", "")
    assert (layers.mode, layers.cache_mb, layers.fetch_deadline_s, layers.prefetch) == ("lazy", 20480, 15.0, False)
    for name, value in {"CORRAL_NODE_LAYER_MODE": "eager", "CORRAL_NODE_LAYER_CACHE_MB": "64",
                        "CORRAL_NODE_LAYER_FETCH_DEADLINE_S": "2.5", "CORRAL_NODE_LAYER_PREFETCH": "true",
                        "CORRAL_IMAGE_SERVICE_URL": "http://images:8002", "CORRAL_INTERNAL_TOKEN": "tok"}.items():
        monkeypatch.setenv(name, value)
    layers = NodeAgentSettings().layers()
    assert (layers.mode, layers.cache_mb, layers.fetch_deadline_s, layers.prefetch) == ("eager", 64, 2.5, True)
    assert (layers.image_service_url, layers.internal_token) == ("http://images:8002", "tok")


# ---- OCI config -----------------------------------------------------------------------


def test_config_json():
    spec = SandboxSpec(environment="e", cpu=1.5, memory_mb=300, pids_limit=77, env={"A": "1"})
    policy = policy_for(spec, NodeAgentSettings(node_id="n1", state_dir="/x"))
    cfg = oci_config.build_config("sb-1", policy, env=spec.env, node_id="n1")
    assert cfg["hostname"] == "sb-1" and cfg["root"] == {"path": "rootfs", "readonly": False}
    lin = cfg["linux"]
    assert lin["cgroupsPath"] == "/corral/n1/sb-1"
    assert {n["type"] for n in lin["namespaces"]} == {"pid", "ipc", "uts", "mount", "network", "cgroup"}
    res = lin["resources"]
    assert res["memory"] == {"limit": 300 << 20, "swap": 300 << 20}
    # No quota (the backend caps it after crun's setup, oci.build_config); the request's weight.
    assert res["cpu"] == {"shares": 2}
    assert res["pids"] == {"limit": 77}
    proc = cfg["process"]
    assert proc["user"]["uid"] == 1000 and proc["user"]["gid"] == 1000
    assert proc["noNewPrivileges"] is True and proc["cwd"] == "/home/user"
    assert all(v == [] for v in proc["capabilities"].values())
    assert "HOME=/home/user" in proc["env"] and "A=1" in proc["env"]
    assert any(e.startswith("PATH=") for e in proc["env"])
    assert proc["rlimits"] == [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}]
    assert "/proc/kcore" in lin["maskedPaths"] and "/proc/sys" in lin["readonlyPaths"]
    assert "swap" not in oci_config.build_config("s", policy, env={}, node_id="n", with_swap_limit=False)[
        "linux"]["resources"]["memory"]


def test_exec_process_spec_root_and_env_override():
    identity = container_identity(NodeAgentSettings(state_dir="/x"))
    p = oci.process_spec(["id"], identity, env=oci.build_env({"A": "1"}, {"A": "2"}), root=True)
    assert p["user"] == {"uid": 0, "gid": 0} and "CAP_DAC_OVERRIDE" in p["capabilities"]["effective"]
    assert "A=2" in p["env"] and "A=1" not in p["env"]


def test_a_command_run_as_root_gets_roots_home_unless_it_names_one():
    identity = container_identity(NodeAgentSettings(state_dir="/x"))
    as_root = exec_process.process_for(ExecRequest(cmd="env", user="root"), {"HOME": "/home/user"}, identity)
    assert "HOME=/root" in as_root["env"] and as_root["user"] == {"uid": 0, "gid": 0}
    as_user = exec_process.process_for(ExecRequest(cmd="env"), {}, identity)
    assert "HOME=/home/user" in as_user["env"]
    named = exec_process.process_for(ExecRequest(cmd="env", user="root", env={"HOME": "/srv"}), {}, identity)
    assert "HOME=/srv" in named["env"] and "HOME=/root" not in named["env"]


# ---- paths ----------------------------------------------------------------------------


@pytest.mark.parametrize("path,parts", [
    ("/etc/passwd", ["etc", "passwd"]),
    ("notes.txt", ["home", "user", "notes.txt"]),
    ("./a//b/./c/", ["home", "user", "a", "b", "c"]),
    ("/", []),
])
def test_split_path(path, parts):
    assert paths.split_path(path) == parts


@pytest.mark.parametrize("path", ["", "..", "../etc", "/a/../b", "a/..", "a\0b", "x" * 5000, "/" + "y" * 300])
def test_split_path_rejects(path):
    with pytest.raises(BadInput) as exc:
        paths.split_path(path)
    assert exc.value.loc == ["query", "path"]


@pytest.fixture
def rootfs(tmp_path):
    root = tmp_path / "rootfs"
    (root / "home/user").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc/motd").write_text("welcome")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host")
    os.symlink(str(outside), root / "home/user/out")
    os.symlink(str(outside / "secret"), root / "home/user/secret")
    os.symlink("/etc/motd", root / "home/user/motd")  # even a link "inside" is refused
    os.mkfifo(root / "home/user/fifo")
    return str(root)


def test_fs_read_refuses_symlinks_and_specials(rootfs, tmp_path):
    fd, size = files.open_read(rootfs, "/etc/motd")
    assert os.read(fd, 100) == b"welcome" and size == 7
    os.close(fd)
    for p in ("secret", "out/secret", "motd", "fifo", "/home"):
        with pytest.raises(BadInput):
            files.open_read(rootfs, p)
    with pytest.raises(NotFound):
        files.open_read(rootfs, "missing")
    with pytest.raises(NotFound):
        files.open_read(rootfs, "nodir/x")


def test_fs_write_creates_parents_and_refuses_escape(rootfs, tmp_path):
    uid, gid = os.getuid(), os.getgid()
    fd, _name, dfd = files.open_write(rootfs, "a/b/c.txt", uid=uid, gid=gid, mode=0o4755)
    os.write(fd, b"x")
    os.close(fd)
    os.close(dfd)
    st = os.stat(f"{rootfs}/home/user/a/b/c.txt")
    assert st.st_mode & 0o7777 == 0o755  # setuid stripped
    for p in ("out/new", "secret", "fifo"):
        with pytest.raises(BadInput):
            files.open_write(rootfs, p, uid=uid, gid=gid)
    assert not (tmp_path / "outside/new").exists()
    assert (tmp_path / "outside/secret").read_text() == "host"


def test_fs_write_over_a_running_program_is_a_conflict(rootfs):
    """ETXTBSY (a sandbox overwriting the busybox its shell runs) is a 409, not a 500."""
    import shutil
    import subprocess

    prog = f"{rootfs}/home/user/prog"
    shutil.copy("/bin/sleep", prog)
    running = subprocess.Popen([prog, "30"])
    try:
        with pytest.raises(Conflict):
            files.open_write(rootfs, "prog", uid=os.getuid(), gid=os.getgid())
    finally:
        running.kill()
        running.wait()


def test_fs_list_and_stat(rootfs):
    entries = {e.name: e for e in files.list_dir(rootfs, "/home/user")}
    assert entries["out"].type == "symlink" and entries["fifo"].type == "other"
    assert entries["motd"].path == "/home/user/motd"
    assert files.stat_path(rootfs, "/etc").type == "dir"
    assert [e.name for e in files.list_dir(rootfs, "/")] == ["etc", "home"]
    with pytest.raises(BadInput):
        files.list_dir(rootfs, "out")


# ---- output capping -------------------------------------------------------------------


async def _pump(payloads: list[bytes], limit: int, encoding: str = "utf-8"):
    r, w = os.pipe()
    seen: list[tuple[str, str]] = []
    pipe = CappedPipe(r, limit, "stdout", lambda n, t: seen.append((n, t)), encoding=encoding)
    for p in payloads:
        try:
            os.write(w, p)
        except BrokenPipeError:
            break
        await asyncio.sleep(0.01)
    os.close(w)
    await asyncio.wait_for(pipe.done, 2)
    return pipe, seen


@pytest.mark.asyncio
async def test_capped_pipe_under_limit():
    pipe, seen = await _pump([b"hello ", "wörld".encode()], 100)
    assert pipe.text() == "hello wörld" and not pipe.truncated
    assert "".join(t for _, t in seen) == "hello wörld"


@pytest.mark.asyncio
async def test_capped_pipe_truncates_and_closes_read_end():
    r, w = os.pipe()
    pipe = CappedPipe(r, 10, "stderr")
    os.write(w, b"0123456789abcdef")
    await asyncio.wait_for(pipe.done, 2)
    assert pipe.truncated and bytes(pipe.buf) == b"0123456789" and pipe.fd == -1
    with pytest.raises(BrokenPipeError):  # what makes `yes` die of SIGPIPE
        os.write(w, b"more")
    os.close(w)


@pytest.mark.asyncio
async def test_capped_pipe_split_utf8_and_replace():
    pipe, seen = await _pump(["é".encode()[:1], "é".encode()[1:], b"\xff"], 100)
    assert "".join(t for _, t in seen) == "é\ufffd" and pipe.text() == "é\ufffd"


@pytest.mark.asyncio
async def test_capped_pipe_base64_keeps_every_byte_and_caps_raw_bytes():
    payloads = [b"\xff\xfe", "é".encode()[:1], "é".encode()[1:] + bytes(range(256))]
    pipe, seen = await _pump(payloads, 100, "base64")
    raw = b"".join(payloads)[:100]
    assert pipe.truncated and base64.b64decode(pipe.text(), validate=True) == raw  # the cap counts raw bytes
    # each piece is the base64 of what one read brought: it decodes on its own
    assert len(seen) == 3 and b"".join(base64.b64decode(t, validate=True) for _, t in seen) == raw


def test_output_encoder_utf8_replaces_and_flushes_a_cut_character_base64_never_holds_back():
    text = OutputEncoder("utf-8")
    assert (text.feed(b"a\xff"), text.feed("é".encode()[:1]), text.flush()) == ("a\ufffd", "", "\ufffd")
    raw = OutputEncoder("base64")
    assert (raw.feed("é".encode()[:1]), raw.flush()) == ("ww==", "")
    assert encode_output(b"\xff\xfeabc\n", "base64") == "//5hYmMK"
    assert encode_output(b"\xff\xfeabc\n", "utf-8") == "\ufffd\ufffdabc\n"


# ---- layer cache ----------------------------------------------------------------------


def _mock(blobs: dict[str, bytes], calls: list[str], delay: float = 0.0) -> httpx.MockTransport:
    async def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if delay:
            await asyncio.sleep(delay)
        if request.url.path == "/v1/environments/py":
            return httpx.Response(200, json={"name": "py", "layers": [
                {"digest": d, "kind": "base", "name": "b", "version": "1", "size": 1} for d in blobs]})
        if request.url.path == "/v1/environments/bad-digest":
            return httpx.Response(200, json={"name": "bad-digest", "layers": [
                {"digest": "md5:abc", "kind": "base", "name": "b", "version": "1", "size": 1}]})
        for digest, data in blobs.items():
            if request.url.path == f"/v1/blobs/{digest}":
                return httpx.Response(200, content=data)
        return httpx.Response(404)

    return httpx.MockTransport(handler)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(digest: str) -> EnvironmentLayer:
    return EnvironmentLayer(kind="base", name="b", version="1", digest=digest, size=1)


def _layer_cache(tmp_path, transport: httpx.MockTransport) -> LayerCache:
    settings = NodeAgentSettings(state_dir=str(tmp_path), image_service_url="http://img")
    return LayerCache(settings.layers(), transport=transport)


@pytest.mark.asyncio
async def test_layer_download_verified_and_shared(tmp_path):
    data = os.urandom(300_000)
    d = _digest(data)
    calls: list[str] = []
    cache = _layer_cache(tmp_path, _mock({d: data}, calls, delay=0.05))
    layers = await cache.resolve_environment("py")
    results = await asyncio.gather(*(cache.ensure(layers) for _ in range(5)))
    assert all(r == [cache.store.path(d)] for r in results)
    assert calls.count(f"/v1/blobs/{d}") == 1
    with open(cache.store.path(d), "rb") as fh:  # noqa: ASYNC230
        assert fh.read() == data
    await cache.ensure([_layer(d)])  # cached: no new request
    assert calls.count(f"/v1/blobs/{d}") == 1
    assert not [n for n in os.listdir(cache.store.dir) if n.endswith(".part")]
    await cache.aclose()


@pytest.mark.asyncio
async def test_layer_hash_mismatch_and_missing(tmp_path):
    good = _digest(b"expected")
    calls: list[str] = []
    cache = _layer_cache(tmp_path, _mock({good: b"tampered"}, calls))
    with pytest.raises(ImageUnavailable, match="mismatch"):
        await cache.ensure([_layer(good)])
    assert os.listdir(cache.store.dir) == []
    with pytest.raises(ImageUnavailable):
        await cache.ensure([_layer(_digest(b"other"))])
    # Layers come from image-service only: one with a malformed digest is refused there.
    with pytest.raises(ImageUnavailable):
        await cache.resolve_environment("bad-digest")
    with pytest.raises(EnvironmentNotFound) as exc:
        await cache.resolve_environment("nope")
    assert http_error(exc.value).status_code == 404
    await cache.aclose()


# ---- manager (test doubles) -----------------------------------------------------------


class _FakeLayers:
    def __init__(self, fail: Exception | None = None):
        self.fail, self.refs, self.fault_listeners = fail, 0, []

    def add_fault_listener(self, callback):
        self.fault_listeners.append(callback)

    async def resolve_environment(self, name, tenant=""):
        if self.fail:
            raise self.fail
        return (_layer("sha256:" + "a" * 64), _layer("sha256:" + "b" * 64))

    async def acquire(self, layers):
        self.refs += 1
        return ["/mnt/base", "/mnt/toolkit"]

    async def release(self, layers):
        self.refs -= 1


@pytest.mark.asyncio
async def test_manager_create_idempotent_and_lower_order():
    now = [0.0]
    layers, backend = _FakeLayers(), FakeBackend(clock=lambda: now[0])
    m = SandboxManager(backend, layers)
    spec = SandboxSpec(environment="e", cpu=2, memory_mb=512)
    await asyncio.gather(m.create("s1", spec), m.create("s1", spec))
    assert [call for call in backend.calls if call[0] == "start"] == [("start", "s1")]
    assert backend.sandboxes["s1"].rootfs == RootFs(["/mnt/toolkit", "/mnt/base"])  # top layer first
    assert m.count() == 1 and m.used_capacity()["cpu"] == spec.reservation.cpu and layers.refs == 1  # its request
    seen = []
    m.on_exit(lambda sid, reason, usage: seen.append((sid, reason)))
    now[0] = 1.0
    await backend.end("s1", ExitReason.oom_killed)
    assert seen == [("s1", "oom_killed")] and m.count() == 0 and layers.refs == 0
    with pytest.raises(NotFound):
        await m.exec("s1", None)
    assert (await m.delete("s1")).wall_time_s == 1.0


@pytest.mark.asyncio
async def test_live_ids_stand_a_sandbox_added_while_they_are_listed():
    # The memory sampler lists them in a thread while the loop adds and drops sandboxes; a
    # density run at 10,000 once lost that race ("dictionary changed size during iteration").
    m = SandboxManager(FakeBackend(), _FakeLayers())
    spec = SandboxSpec(environment="e")
    await m.create("s1", spec)
    is_live = m.is_live

    def racing(sid):
        m._entries.setdefault("s-new", m._entries[sid])  # what the loop did meanwhile
        return is_live(sid)

    m.is_live = racing
    assert m.live_ids() == ["s1"]


@pytest.mark.asyncio
async def test_manager_create_failures_are_typed():
    from corral_common.contracts.sandboxes import FailureReason

    m = SandboxManager(FakeBackend(), _FakeLayers(fail=EnvironmentNotFound("no env")))
    with pytest.raises(StartFailed) as exc:
        await m.create("s1", SandboxSpec(environment="e"))
    assert exc.value.reason == FailureReason.image_unavailable and m.count() == 0
    layers = _FakeLayers()
    backend = FakeBackend()
    backend.fail_start = RuntimeError("crun broke")
    m = SandboxManager(backend, layers)
    with pytest.raises(StartFailed) as exc:
        await m.create("s1", SandboxSpec(environment="e"))
    assert exc.value.reason == FailureReason.start_failed and layers.refs == 0 and m.count() == 0


@pytest.mark.asyncio
async def test_layer_fault_fails_only_the_sandboxes_on_that_layer():
    class _TwoEnvLayers(_FakeLayers):
        async def resolve_environment(self, name, tenant=""):
            return (_layer("sha256:" + name * 64),)

    layers, backend = _TwoEnvLayers(), FakeBackend()
    m = SandboxManager(backend, layers)
    await m.create("on-a", SandboxSpec(environment="a"))
    await m.create("on-b", SandboxSpec(environment="b"))
    ended = asyncio.Event()
    seen = []

    def listener(sid, reason, usage):
        seen.append((sid, reason))
        ended.set()

    m.on_exit(listener)
    for callback in layers.fault_listeners:
        callback("sha256:" + "a" * 64, "image-service unreachable")
    await asyncio.wait_for(ended.wait(), 5)
    assert seen == [("on-a", ExitReason.image_unavailable)]
    assert [call for call in backend.calls if call[0] == "stop"] == [("stop", "on-a")] and m.ids() == ["on-b"]
