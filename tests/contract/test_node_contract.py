"""The node-agent's HTTP API against its contract (``corral_common.contracts.node``):

- every route of the node app takes and answers models of the contract module, read from
  the app's own OpenAPI document (a route added with a dict reply, or a model of its own,
  fails here), unless it is a raw-bytes route listed in ``RAW_ROUTES``;
- ``NodeAgentClient`` against a live node-agent (its real app served on loopback, the container
  backend on real crun, over real Redis, RabbitMQ and image-service; the sandbox created
  through the api and the scheduler as in production): every method on one container
  sandbox, and ids that need escaping reach no other sandbox and no other path.
"""

import asyncio
import io
import shutil
import socket
import tarfile
import threading
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
import redis
import uvicorn
from pydantic import BaseModel

from corral_common.contracts import node as contract
from corral_common.contracts.node import (
    CommitReply,
    CommitRequest,
    ExecChunk,
    ExecRequest,
    NetworkState,
    SnapshotRequest,
    StateReply,
)
from corral_common.contracts.node_client import NodeAgentClient, NodeAgentUnreachable
from corral_common.web.errors import CorralError
from corral_common.web.serving import GRACEFUL_SHUTDOWN_S
from tests.polling import until_sync
from tests.sandbox_host import container_skip_reason

CONTAINER_SKIP = container_skip_reason()  # entered the mount namespace already (conftest)
TOKEN = "node-contract-token"
API_KEY = "node-contract-key-0123456789"
TENANT = "contract"
SESSION = uuid.uuid4().hex[:8]  # node ids: sessions on one host share its cgroups


# ---- (a) every route's models are the contract's ------------------------------------------


def _model_names(schema: dict) -> list[str]:
    """The component names a JSON body refers to: a model, or a list of one."""
    if "$ref" in schema:
        return [schema["$ref"].rsplit("/", 1)[-1]]
    if schema.get("type") == "array" and "$ref" in schema.get("items", {}):
        return [schema["items"]["$ref"].rsplit("/", 1)[-1]]
    return []


def _is_contract_model(name: str) -> bool:
    model = getattr(contract, name, None)
    return isinstance(model, type) and issubclass(model, BaseModel) and name in contract.__all__


def test_every_node_route_takes_and_answers_contract_models(tmp_path):
    from corral_node_agent.app import create_app
    from corral_node_agent.settings import NodeAgentSettings

    app = create_app(NodeAgentSettings(node_id="contract-routes", state_dir=str(tmp_path), log_json=False))
    paths = app.openapi()["paths"]
    raw = {(m, p) for m, p in contract.RAW_ROUTES}
    problems, seen = [], 0
    for path, operations in paths.items():
        for method, operation in operations.items():
            method = method.upper()
            if (method, path) in raw or ("*", path) in raw:
                continue
            seen += 1
            body = operation.get("requestBody")
            if body is not None:
                schema = body["content"].get("application/json", {}).get("schema", {})
                names = _model_names(schema)
                if not names or not all(_is_contract_model(n) for n in names):
                    problems.append(f"{method} {path}: request body {schema} is not a contract model")
            answers = {status: r for status, r in operation["responses"].items() if status.startswith("2")}
            assert answers, f"{method} {path} declares no success answer"
            for status, answer in answers.items():
                content = answer.get("content")
                if content is None:
                    if status != "204":
                        problems.append(f"{method} {path}: {status} has no body model")
                    continue
                schema = content.get("application/json", {}).get("schema", {})
                names = _model_names(schema)
                if not names or not all(_is_contract_model(n) for n in names):
                    problems.append(f"{method} {path}: {status} answers {schema}, not a contract model")
    assert seen >= 15, f"only {seen} node routes found: the walk is broken"
    assert problems == []


def test_raw_routes_are_the_ones_the_node_serves():
    """The exempt list names real routes (a renamed route cannot stay exempt by accident)."""
    from corral_node_agent.app import create_app
    from corral_node_agent.settings import NodeAgentSettings

    app = create_app(NodeAgentSettings(node_id="contract-raw", log_json=False))
    served: set[str] = set()
    for path, operations in app.openapi()["paths"].items():
        served.update(f"{m.upper()} {path}" for m in operations)
    served |= {"GET /metrics", "* /v1/sandboxes/{sandbox_id}/ports/{port}/{path:path}"}  # not in the schema
    assert {f"{m} {p}" for m, p in contract.RAW_ROUTES} <= served


# ---- (b) NodeAgentClient against a live node-agent ------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _served(app, what: str, port: int | None = None):
    """``app`` (lifespan and all) served on loopback in its own thread and loop; its base URL."""
    port = port or _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", log_config=None,
                                           access_log=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S))
    thread = threading.Thread(target=server.run, name=f"contract-{what}", daemon=True)
    thread.start()
    until_sync(lambda: server.started or not thread.is_alive(), 60, f"{what} to start", 0.02)
    if not server.started:
        raise AssertionError(f"{what} did not start (its lifespan failed: see the log)")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(60)


def _busybox_tar(root: Path) -> bytes:
    from corral_image_service.builders import build_busybox

    build_busybox(root)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.add(root, arcname=".")
    return buf.getvalue()


@pytest.fixture(scope="module")
def live(service_urls, tmp_path_factory, contract_dir):
    """A node-agent on the container backend with one running busybox sandbox."""
    if CONTAINER_SKIP:
        pytest.skip(CONTAINER_SKIP)
    if shutil.which("mkfs.erofs") is None:
        pytest.skip("image-service builds EROFS layers: needs mkfs.erofs")
    from corral_api.app import create_app as create_api
    from corral_api.settings import ApiSettings
    from corral_image_service.app import create_app as create_images
    from corral_image_service.settings import ImageServiceSettings
    from corral_node_agent.app import cleanup
    from corral_node_agent.app import create_app as create_node
    from corral_node_agent.fncall.settings import FncallNodeSettings
    from corral_node_agent.settings import NodeAgentSettings
    from corral_scheduler.app import create_app as create_scheduler
    from corral_scheduler.settings import SchedulerSettings

    tmp = tmp_path_factory.mktemp("node-contract")
    urls = service_urls["isolated"](5, "nodecontract")  # a Redis db and vhost no other test uses
    redis.Redis.from_url(urls["redis_url"]).flushdb()
    common = {**urls, "internal_token": TOKEN, "log_json": False, "log_level": "WARNING"}
    node_port = _free_port()
    node_settings = NodeAgentSettings(**common, node_id=f"contract-{SESSION}", port=node_port, host="127.0.0.1",
                                      state_dir=f"{contract_dir}/node-{SESSION}", layer_mode="eager",
                                      capacity_registry_dir=str(tmp / "capacity"), adopt_on_start=False,
                                      fncall=FncallNodeSettings(enabled=False))
    with ExitStack() as stack:
        images_url = stack.enter_context(_served(create_images(ImageServiceSettings(
            data_dir=str(tmp / "images"), internal_token=TOKEN, log_json=False, log_level="WARNING")), "images"))
        with httpx.Client(base_url=images_url, headers={"x-corral-internal-token": TOKEN}, timeout=60) as c:
            layer = c.post("/v1/layers", params={"kind": "base", "name": "busybox", "version": "1"},
                           content=_busybox_tar(tmp / "rootfs"), headers={"content-type": "application/x-tar"})
            assert layer.status_code == 201, layer.text
            created = c.post("/v1/environments", json={"name": "busybox", "base": layer.json()["ref"]})
            assert created.status_code == 201, created.text
        common["image_service_url"] = images_url
        node_settings = node_settings.model_copy(update={"image_service_url": images_url})
        stack.callback(lambda: asyncio.run(cleanup(node_settings)))  # after the node stopped: nothing left
        stack.enter_context(_served(create_scheduler(SchedulerSettings(**common)), "scheduler"))
        node_url = stack.enter_context(_served(create_node(node_settings), "node-agent", node_port))
        api_url = stack.enter_context(_served(create_api(ApiSettings(
            **common, database_url=f"sqlite:///{tmp}/api.db", keys=f"{TENANT}:{API_KEY}")), "api"))
        api = stack.enter_context(httpx.Client(base_url=api_url, timeout=60,
                                               headers={"authorization": f"Bearer {API_KEY}"}))
        ids = []
        for _ in range(2):  # the one the cases use, and a neighbour an escaped id must never reach
            sandbox = api.post("/v1/sandboxes", params={"wait_for": "running", "timeout": 60},
                               json={"environment": "busybox", "memory_mb": 128, "disk_mb": 64})
            assert sandbox.status_code == 202 and sandbox.json()["state"] == "running", sandbox.text
            ids.append(sandbox.json()["id"])
        try:
            yield {"node": node_url, "sandbox": ids[0], "neighbour": ids[1]}
        finally:
            for sid in ids:
                api.delete(f"/v1/sandboxes/{sid}")
            until_sync(lambda: all(_ended(api.get(f"/v1/sandboxes/{sid}")) for sid in ids), 60,
                       "the sandboxes to end")


def _ended(answer: httpx.Response) -> bool:
    return answer.status_code == 404 or answer.json()["state"] in ("terminated", "failed")


@pytest.fixture
async def nodes():
    client = NodeAgentClient(TOKEN)
    yield client
    await client.aclose()


async def test_exec_and_its_stream(live, nodes):
    node, sid = live["node"], live["sandbox"]
    result = await nodes.exec(node, sid, ExecRequest(cmd="echo hi; echo err >&2; exit 3"))
    assert (result.exit_code, result.stdout, result.stderr) == (3, "hi\n", "err\n")
    lines = [line async for line in _lines(await nodes.exec_stream(node, sid, ExecRequest(cmd=["echo", "streamed"])))]
    chunks = [ExecChunk.model_validate_json(line) for line in lines]
    assert "".join(c.data or "" for c in chunks if c.type == "stdout") == "streamed\n"
    assert chunks[-1].type == "exit" and chunks[-1].result is not None and chunks[-1].result.exit_code == 0


async def _lines(body):
    buffer = b""
    async for piece in body:
        buffer += piece
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line
    assert buffer == b""


async def test_files_put_get_stat_and_list(live, nodes):
    node, sid = live["node"], live["sandbox"]
    written = await nodes.write_file(node, sid, "contract/a.txt", b"hello\n", mode=0o600)
    assert (written.path, written.size) == ("contract/a.txt", 6)

    async def pieces():
        for piece in (b"streamed ", b"upload\n"):
            yield piece

    assert (await nodes.write_file(node, sid, "contract/b.txt", pieces())).size == 16
    info = await nodes.stat(node, sid, "contract/a.txt")
    assert (info.type, info.size, info.mode & 0o777) == ("file", 6, 0o600)
    assert b"".join([p async for p in await nodes.read_file(node, sid, "contract/b.txt")]) == b"streamed upload\n"
    entries = await nodes.list_dir(node, sid, "contract")
    assert entries is not None and sorted(e.name for e in entries) == ["a.txt", "b.txt"]
    assert await nodes.list_dir(node, sid, "contract/a.txt") is None  # a file, not a directory
    with pytest.raises(CorralError) as caught:
        await nodes.stat(node, sid, "contract/missing")
    assert caught.value.status_code == 404


async def test_usage_network_pause_and_resume(live, nodes):
    node, sid = live["node"], live["sandbox"]
    usage = await nodes.usage(node, sid)
    assert usage.wall_time_s > 0 and usage.peak_memory_bytes > 0
    assert await nodes.network(node, sid) == NetworkState(counters={}, denied=[])  # network "none"
    assert await nodes.pause(node, sid) == StateReply(state="paused")
    try:
        with pytest.raises(CorralError) as caught:
            await nodes.exec(node, sid, ExecRequest(cmd="true"))
        assert (caught.value.status_code, caught.value.code) == (409, "sandbox_paused")
    finally:
        assert await nodes.resume(node, sid) == StateReply(state="running")
    assert (await nodes.exec(node, sid, ExecRequest(cmd="true"))).exit_code == 0


async def test_the_nodes_own_calls_and_what_a_container_cannot_do(live, nodes):
    node, sid = live["node"], live["sandbox"]
    assert sid in {a.sandbox_id for a in await nodes.activity(node)}
    health = await nodes.health(node)
    assert health.status == "ok" and health.sandboxes >= 2 and "container" in health.backends
    assert (await nodes.fncall_pools(node)).status
    for call in (nodes.balloon(node, sid), nodes.screen(node, sid),
                 nodes.snapshot(node, sid, SnapshotRequest(snapshot_id="snap-contract"))):
        with pytest.raises(CorralError) as caught:
            await call
        assert (caught.value.status_code, caught.value.code) == (409, "unsupported_by_backend")
    await nodes.delete_snapshot(node, "snap-never-made")  # on no backend of the node: no error (204)


async def test_commit_answers_image_services_layer(live, nodes):
    node, sid = live["node"], live["sandbox"]
    await nodes.write_file(node, sid, "committed.txt", b"kept\n")
    reply = await nodes.commit(node, sid, CommitRequest(name="contract-commit", version=SESSION, owner=TENANT))
    assert isinstance(reply, CommitReply)
    assert (reply.kind, reply.name, reply.version, reply.owner) == ("diff", "contract-commit", SESSION, TENANT)
    assert reply.digest.startswith("sha256:") and reply.size > 0


@pytest.mark.parametrize("shape", ["{sid}/../{neighbour}", "{neighbour}?x=1", "{neighbour}#x", "..", ".",
                                   "{neighbour}/", "a/../b", "x?y"])
async def test_an_id_that_needs_escaping_names_no_other_sandbox_or_path(live, nodes, shape):
    """Unescaped, ``sb-a/../sb-b`` would be sb-b's exec and ``sb-b?x=1`` sb-b with a query:
    escaped, each is one segment, a sandbox that does not exist."""
    node = live["node"]
    sandbox_id = shape.format(sid=live["sandbox"], neighbour=live["neighbour"])
    for call in (nodes.exec(node, sandbox_id, ExecRequest(cmd="echo reached")), nodes.usage(node, sandbox_id),
                 nodes.pause(node, sandbox_id)):
        with pytest.raises(CorralError) as caught:
            await call
        assert caught.value.status_code == 404, (sandbox_id, caught.value.status_code, caught.value.message)
    # Whatever the node answered, the neighbour was not touched.
    assert (await nodes.exec(node, live["neighbour"], ExecRequest(cmd="true"))).exit_code == 0


async def test_the_token_goes_along_and_a_wrong_one_is_refused(live):
    node, sid = live["node"], live["sandbox"]
    wrong = NodeAgentClient("wrong-token")
    try:
        with pytest.raises(CorralError) as caught:
            await wrong.usage(node, sid)
        assert (caught.value.status_code, caught.value.code) == (401, "unauthorized")
    finally:
        await wrong.aclose()


async def test_a_node_that_does_not_answer_is_unreachable():
    client = NodeAgentClient(TOKEN, connect_timeout_s=2)
    try:
        with pytest.raises(NodeAgentUnreachable) as caught:
            await client.usage(f"http://127.0.0.1:{_free_port()}", "sb-x")
        assert (caught.value.status_code, caught.value.code) == (503, "unavailable")
        assert caught.value.message.startswith("node-agent unreachable")
    finally:
        await client.aclose()
