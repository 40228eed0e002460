"""SandboxManager + LayerCache + data-path router end to end, with real crun.

image-service is replaced by an httpx MockTransport serving the busybox EROFS blob, so
the whole create → exec/files → delete path runs, including download and shared mounts.
"""

import hashlib
import json
import os
from types import SimpleNamespace

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI

from corral_common.contracts.sandboxes import FailureReason, SandboxSpec
from corral_host import mounts
from corral_node_agent.backends.container import ContainerBackend
from corral_node_agent.errors import StartFailed
from corral_node_agent.http_errors import install_node_error_handlers
from corral_node_agent.layers import LayerCache
from corral_node_agent.sandboxes.router import router
from corral_node_agent.sandboxes.service import SandboxManager
from corral_node_agent.settings import NodeAgentSettings
from tests.polling import until

pytestmark = pytest.mark.asyncio


def image_service(blob: bytes, hits: list[str]) -> httpx.MockTransport:
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()

    def handler(request: httpx.Request) -> httpx.Response:
        hits.append(request.url.path)
        if request.url.path == "/v1/environments/busybox":
            return httpx.Response(200, json={"name": "busybox", "layers": [
                {"kind": "base", "name": "busybox", "version": "1", "digest": digest, "size": len(blob)}]})
        if request.url.path == f"/v1/blobs/{digest}":
            return httpx.Response(200, content=blob)
        return httpx.Response(404, json={"error": {"code": "not_found"}})

    return httpx.MockTransport(handler)


@pytest_asyncio.fixture
async def node(state_dir, node_id, erofs_image):
    with open(erofs_image, "rb") as fh:  # noqa: ASYNC230 - test setup
        blob = fh.read()
    hits: list[str] = []
    settings = NodeAgentSettings(node_id=f"{node_id}-mgr", state_dir=state_dir, internal_token="s3cret",
                                 image_service_url="http://image-service")
    layers = LayerCache(settings.layers(), transport=image_service(blob, hits))
    manager = SandboxManager(ContainerBackend(settings), layers)
    await manager.start()
    app = FastAPI()
    install_node_error_handlers(app)
    app.include_router(router)
    app.state.services = SimpleNamespace(manager=manager)
    app.state.settings = settings
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node",
                               headers={"X-Corral-Internal-Token": "s3cret"})
    yield manager, client, hits
    await client.aclose()
    await manager.close()


async def test_create_exec_files_delete(node):
    manager, client, hits = node
    spec = SandboxSpec(environment="busybox", memory_mb=64, disk_mb=32)
    await manager.create("m1", spec)
    await manager.create("m1", spec)  # redelivered create: no-op
    await manager.create("m2", spec)
    # What the two reserve: their memory requests (an idle sandbox's use), not their 64 MiB limits.
    assert manager.count() == 2 and manager.used_capacity()["memory_mb"] == 2 * spec.reservation.memory_mb
    assert sum(1 for h in hits if h.startswith("/v1/blobs/")) == 1  # one download for both
    (digest_hex,) = os.listdir(manager.layers.mounts.dir)
    assert manager.layers.refcount("sha256:" + digest_hex) == 2

    r = await client.post("/v1/sandboxes/m1/exec", json={"cmd": "echo hi; hostname"})
    assert r.status_code == 200 and r.json()["stdout"] == "hi\nm1\n"

    async with client.stream("POST", "/v1/sandboxes/m1/exec/stream", json={"cmd": "echo a; echo b >&2"}) as resp:
        assert resp.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) async for line in resp.aiter_lines() if line]
    assert lines[-1]["type"] == "exit" and lines[-1]["result"]["exit_code"] == 0
    assert {(c["type"], c["data"]) for c in lines[:-1]} == {("stdout", "a\n"), ("stderr", "b\n")}
    raw = {"cmd": "printf '\\377\\376'; printf '\\303' >&2", "output_encoding": "base64"}
    r = await client.post("/v1/sandboxes/m1/exec", json=raw)
    assert (r.json()["encoding"], r.json()["stdout"], r.json()["stderr"]) == ("base64", "//4=", "ww==")
    async with client.stream("POST", "/v1/sandboxes/m1/exec/stream", json=raw) as resp:
        lines = [json.loads(line) async for line in resp.aiter_lines() if line]
    assert {(c["type"], c["data"], c["encoding"]) for c in lines[:-1]} == {("stdout", "//4=", "base64"),
                                                                            ("stderr", "ww==", "base64")}
    assert lines[-1]["result"]["encoding"] == "base64"
    r = await client.post("/v1/sandboxes/m1/exec", json={"cmd": "true", "output_encoding": "latin-1"})
    assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["body", "output_encoding"]

    r = await client.put("/v1/sandboxes/m1/files", params={"path": "notes/a.txt", "mode": "600"}, content=b"data")
    assert r.status_code == 200 and r.json()["size"] == 4
    r = await client.get("/v1/sandboxes/m1/files", params={"path": "/home/user/notes/a.txt"})
    assert r.status_code == 200 and r.content == b"data"
    r = await client.get("/v1/sandboxes/m1/files", params={"path": "notes"})
    assert r.status_code == 200 and [e["name"] for e in r.json()] == ["a.txt"] and r.json()[0]["mode"] == 0o600
    r = await client.get("/v1/sandboxes/m1/files", params={"path": "../x"})
    assert r.status_code == 400 and r.json()["error"]["details"][0]["loc"] == ["query", "path"]
    r = await client.get("/v1/sandboxes/m1/files", params={"path": "missing"})
    assert r.status_code == 404
    r = await client.post("/v1/sandboxes/nope/exec", json={"cmd": "true"})
    assert r.status_code == 404
    r = await client.post("/v1/sandboxes/nope/exec/stream", json={"cmd": "true"})
    assert r.status_code == 404
    r = await client.post("/v1/sandboxes/m1/exec", json={"cmd": "true"}, headers={"X-Corral-Internal-Token": "bad"})
    assert r.status_code == 401

    u = await manager.delete("m1")
    assert u.wall_time_s > 0
    assert manager.layers.refcount("sha256:" + digest_hex) == 1
    await manager.delete("m2")
    await manager.delete("m2")
    assert manager.count() == 0
    # The unused layer stays mounted for the next sandbox (a cache) until the agent closes.
    assert manager.layers.refcount("sha256:" + digest_hex) == 0
    assert [m for m in mounts.mountpoints() if m.startswith(manager.layers.root)] == [
        manager.layers.mounts.path("sha256:" + digest_hex)]
    await manager.close()
    assert not any(m.startswith(manager.layers.root) for m in mounts.mountpoints())


async def test_unknown_environment_is_image_unavailable(node):
    manager, _client, _hits = node
    with pytest.raises(StartFailed) as exc:
        await manager.create("m3", SandboxSpec(environment="nope"))
    assert exc.value.reason == FailureReason.image_unavailable
    assert manager.count() == 0


async def test_exit_listener(node):
    manager, _client, _hits = node
    import asyncio

    seen = []
    ended = asyncio.Event()

    def listener(sid, reason, usage):
        seen.append((sid, str(reason)))
        ended.set()

    manager.on_exit(listener)
    await manager.create("m4", SandboxSpec(environment="busybox", memory_mb=64, disk_mb=32, timeout_s=1))
    await asyncio.wait_for(ended.wait(), 10)
    assert seen == [("m4", "timeout")]
    assert manager.count() == 0
    assert not any(m.startswith(f"{manager.backend.sandboxes_dir}/m4") for m in mounts.mountpoints())


async def test_usage_carries_the_sandboxs_measured_memory_and_a_container_has_no_balloon(node, node_id):
    """The manager's accounting (one sample per pass, as the agent's loop runs it) ends up in the
    Usage that delete returns; a container answers the balloon route with a JSON 409."""
    from corral_host.cgroups.detect import cgroup_driver
    from corral_node_agent.memory.accounting import MemoryAccounting

    manager, client, _ = node
    manager.memory = MemoryAccounting(cgroup_driver(), f"{node_id}-mgr")
    await manager.create("mem1", SandboxSpec(environment="busybox", memory_mb=128, disk_mb=32))
    r = await client.post("/v1/sandboxes/mem1/exec", json={
        "cmd": "awk 'BEGIN { s = sprintf(\"%33554432s\", \"\"); system(\"sleep 600\") }' >/dev/null 2>&1 &"})
    assert r.status_code == 200
    await until(lambda: (manager.sample_memory() or manager.memory.account("mem1"))
                and manager.memory.account("mem1").working_set_bytes > 32 << 20, 30, "the 32 MiB to be sampled")
    live = manager.usage("mem1")
    assert live.working_set_bytes > 32 << 20 and live.peak_working_set_bytes >= live.working_set_bytes
    r = await client.get("/v1/sandboxes/mem1/balloon")
    assert r.status_code == 409 and r.json()["error"]["code"] == "unsupported_by_backend"
    usage = await manager.delete("mem1")
    assert usage.peak_working_set_bytes > 32 << 20 and usage.memory_mib_seconds > 0
    assert manager.memory.account("mem1") is None  # closed with the sandbox


async def test_a_full_node_refuses_a_create_and_leaves_nothing_of_it(node, state_dir):
    """The agent's own count cap (it agrees with what the scheduler was told, so this is the
    backstop for a placement that raced): a clear refusal before anything is made."""
    from corral_host.cgroups.node import sandbox_cgroup_path
    from corral_node_agent.errors import Unavailable

    manager, _client, _hits = node
    manager.max_sandboxes = 1
    spec = SandboxSpec(environment="busybox", memory_mb=32, disk_mb=16, pids_limit=8)
    await manager.create("full-1", spec)
    layer_refs = {d: manager.layers.refcount("sha256:" + d) for d in os.listdir(manager.layers.mounts.dir)}
    with pytest.raises(Unavailable, match="node is full: it runs 1 sandboxes"):
        await manager.create("full-2", spec)
    assert manager.ids() == ["full-1"]
    assert not manager.is_live("full-2")
    assert not os.path.exists(f"{state_dir}/sandboxes/full-2")
    assert not os.path.exists(f"{manager.backend.crun_root}/full-2")
    assert not os.path.exists(f"{state_dir}/owners/full-2.json")
    cgroup = sandbox_cgroup_path(manager.backend.settings.node_id, "full-2").lstrip("/")
    assert not [h for h in ("memory", "pids", "cpu,cpuacct") if os.path.exists(f"/sys/fs/cgroup/{h}/{cgroup}")]
    assert not [m for m in mounts.mountpoints() if "full-2" in m]
    assert {d: manager.layers.refcount("sha256:" + d) for d in os.listdir(manager.layers.mounts.dir)} == layer_refs
    await manager.delete("full-1")
    await manager.create("full-2", spec)  # room again: it starts
    assert manager.is_live("full-2")
    await manager.delete("full-2")


@pytest_asyncio.fixture
async def repointed(state_dir, node_id, work_dir):
    """A node whose image-service says environment "busybox" is version 2 now, while a
    sandbox's record pins version 1 (the api resolved it before the environment was re-pointed)."""
    import shutil
    import subprocess

    from corral_common.contracts.images import EnvironmentLayer, ResolvedImage
    from tests.integration.node_agent.conftest import build_busybox_rootfs

    blobs, layers = {}, {}
    for version in ("1", "2"):
        root, image = f"{state_dir}-v{version}-root", f"{state_dir}-v{version}.erofs"
        build_busybox_rootfs(root)
        with open(f"{root}/version", "w") as fh:  # noqa: ASYNC230 - test setup
            fh.write(f"v{version}\n")
        subprocess.run(["mkfs.erofs", "-zlz4hc", image, root], check=True, capture_output=True)
        shutil.rmtree(root)
        with open(image, "rb") as fh:  # noqa: ASYNC230 - test setup
            blob = fh.read()
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        blobs[digest] = blob
        layers[version] = EnvironmentLayer(kind="base", name="busybox", version=version, digest=digest, size=len(blob))
    hits: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hits.append(request.url.path)
        if request.url.path == "/v1/environments/busybox":  # re-pointed: version 2
            return httpx.Response(200, json={"name": "busybox", "layers": [layers["2"].model_dump()]})
        digest = request.url.path.removeprefix("/v1/blobs/")
        if digest in blobs:
            return httpx.Response(200, content=blobs[digest])
        return httpx.Response(404, json={"error": {"code": "not_found"}})

    settings = NodeAgentSettings(node_id=f"{node_id}-pin", state_dir=state_dir, image_service_url="http://image-service")
    manager = SandboxManager(ContainerBackend(settings),
                             LayerCache(settings.layers(), transport=httpx.MockTransport(handler)))
    await manager.start()
    yield manager, ResolvedImage(name="busybox", layers=(layers["1"],)), hits
    await manager.close()


async def test_a_pinned_sandbox_starts_on_its_pin_without_asking_for_the_environment(repointed):
    from corral_common.contracts.exec import ExecRequest

    manager, pin, hits = repointed
    spec = SandboxSpec(environment="busybox", memory_mb=64, disk_mb=32)
    await manager.create("pinned", spec, image=pin)
    assert not [h for h in hits if h.startswith("/v1/environments/")]  # the catalog was not consulted
    out = await manager.exec("pinned", ExecRequest(cmd="cat /version", timeout_s=10))
    assert out.stdout == "v1\n"  # the layers the api resolved, not what the name points at now
    # A record without a pin (compatibility) still resolves the name on the node.
    await manager.create("unpinned", spec)
    assert [h for h in hits if h.startswith("/v1/environments/")] == ["/v1/environments/busybox"]
    assert (await manager.exec("unpinned", ExecRequest(cmd="cat /version", timeout_s=10))).stdout == "v2\n"
    await manager.delete("pinned")
    await manager.delete("unpinned")
