"""The node-agent contract: its commit reply still matches what image-service answers, and the
one client escapes every id, sends the token, and raises the node's errors as the node said
them (its live run: tests/contract/test_node_contract.py)."""

import json
from datetime import UTC, datetime

import httpx
import pytest

from corral_common.contracts.node import CommitReply, CommitRequest, ExecRequest, FileInfo, NetworkPolicy
from corral_common.contracts.node_client import (
    NodeAgentClient,
    NodeAgentSyncClient,
    NodeAgentUnreachable,
    ingress_url,
)
from corral_common.web.errors import CorralError
from corral_common.web.internal import INTERNAL_TOKEN_HEADER
from corral_image_service.layers.schemas import LayerKind, LayerOut

NODE = "http://node-1:7000/"
D = "sha256:" + "a" * 64
USAGE = {"cpu_seconds": 1.5}
SNEAKY = ["sb-a/../sb-b", "sb-b?x=1", "..", ".", "a#b", "sb-b/"]


def test_the_commit_reply_is_image_services_layer():
    assert set(CommitReply.model_fields) <= set(LayerOut.model_fields)
    layer = LayerOut(owner="acme", kind=LayerKind.diff, name="c", version="1", ref="c:1", digest=D, size=5,
                     created_at=datetime.now(UTC))
    assert CommitReply.model_validate_json(layer.model_dump_json()).model_dump() == layer.model_dump()


class Node:
    """A stand-in node-agent: records what it was asked, answers ``reply`` (status, body)."""

    def __init__(self, status: int = 200, body: object = USAGE, headers: dict | None = None):
        self.status, self.body, self.headers = status, body, headers or {}
        self.asked: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.asked.append(request)
        return httpx.Response(self.status, json=self.body, headers=self.headers)


def client(node: Node) -> NodeAgentClient:
    return NodeAgentClient("tok", transport=httpx.MockTransport(node))


@pytest.mark.parametrize("sandbox_id", SNEAKY)
async def test_every_id_is_one_path_segment(sandbox_id):
    node = Node()
    nodes = client(node)
    try:
        await nodes.usage(NODE, sandbox_id)
    finally:
        await nodes.aclose()
    raw = node.asked[0].url.raw_path.decode()
    assert raw.startswith("/v1/sandboxes/") and raw.endswith("/usage") and "?" not in raw
    segment = raw.removeprefix("/v1/sandboxes/").removesuffix("/usage")
    assert "/" not in segment and segment not in (".", "..")
    assert httpx.URL("http://x/" + segment).path.lstrip("/") in (sandbox_id, "%2E" * len(sandbox_id))


async def test_the_token_and_the_housekeeping_mark_go_along():
    node = Node(body={"exit_code": 0, "stdout": "", "stderr": "", "duration_ms": 1.0})
    nodes = client(node)
    try:
        await nodes.exec(NODE, "sb-1", ExecRequest(cmd="true"))
        await nodes.exec(NODE, "sb-1", ExecRequest(cmd="true"), housekeeping=True)
    finally:
        await nodes.aclose()
    assert all(r.headers[INTERNAL_TOKEN_HEADER] == "tok" for r in node.asked)
    assert ["X-Corral-Housekeeping" in r.headers for r in node.asked] == [False, True]
    assert json.loads(node.asked[0].content)["cmd"] == "true"


async def test_bodies_and_queries_are_the_contracts():
    node = Node(body={"network": {"allow": ["pypi.org"], "presets": [], "bandwidth_mbit": None}})
    nodes = client(node)
    try:
        applied = await nodes.set_network(NODE, "sb-1", NetworkPolicy(allow=["pypi.org"]))
        assert applied.network.allow == ["pypi.org"]
        node.body = {"path": "a b&c", "size": 3}
        await nodes.write_file(NODE, "sb-1", "a b&c", b"abc", mode=0o600)
        node.body = {"owner": "acme", "kind": "diff", "name": "c", "version": "1", "ref": "c:1", "digest": D,
                     "size": 5, "created_at": "2026-01-01T00:00:00Z"}
        await nodes.commit(NODE, "sb-1", CommitRequest(name="c", version="1", owner="acme"))
    finally:
        await nodes.aclose()
    put_files = node.asked[1]
    assert (put_files.url.params["path"], put_files.url.params["mode"], put_files.content) == ("a b&c", "600", b"abc")
    assert json.loads(node.asked[2].content) == {"name": "c", "version": "1", "owner": "acme"}  # no null quota


async def test_a_directory_lists_and_a_file_is_not_one():
    entry = FileInfo(name="a", path="/home/user/a", type="file", size=1, mode=0o644, mtime=0.0)
    node = Node(body=[entry.model_dump()])
    nodes = client(node)
    try:
        assert await nodes.list_dir(NODE, "sb-1", ".") == [entry]
        node.body, node.headers = None, {"content-type": "application/octet-stream"}
        assert await nodes.list_dir(NODE, "sb-1", "a") is None
    finally:
        await nodes.aclose()


async def test_the_nodes_error_is_raised_as_it_said_it():
    node = Node(409, {"error": {"code": "sandbox_paused", "message": "sandbox sb-1 is paused",
                                "details": [{"loc": ["path", "sandbox_id"]}]}})
    nodes = client(node)
    try:
        with pytest.raises(CorralError) as caught:
            await nodes.exec(NODE, "sb-1", ExecRequest(cmd="true"))
    finally:
        await nodes.aclose()
    error = caught.value
    assert (error.status_code, error.code, error.message, error.loc) == (
        409, "sandbox_paused", "sandbox sb-1 is paused", ["path", "sandbox_id"])


async def test_no_answer_is_unreachable_and_a_full_pool_is_a_pool_timeout():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    def full(request: httpx.Request) -> httpx.Response:
        raise httpx.PoolTimeout("no free connection", request=request)

    for handler, expected in ((refuse, NodeAgentUnreachable), (full, httpx.PoolTimeout)):
        nodes = NodeAgentClient("", transport=httpx.MockTransport(handler))
        try:
            with pytest.raises(expected) as caught:
                await nodes.usage(NODE, "sb-1")
            with pytest.raises(expected):
                await nodes.read_file(NODE, "sb-1", "a")  # the streamed calls too
        finally:
            await nodes.aclose()
    unreachable = NodeAgentUnreachable("node-agent unreachable: ConnectError")
    assert (unreachable.status_code, unreachable.code) == (503, "unavailable")
    assert caught.type is httpx.PoolTimeout


def test_ingress_paths_keep_their_segments_each_escaped():
    assert ingress_url(NODE, "sb-1", 8080, "") == "http://node-1:7000/v1/sandboxes/sb-1/ports/8080/"
    assert ingress_url(NODE, "sb/1", 8080, "api/v1/../x?y") == (
        "http://node-1:7000/v1/sandboxes/sb%2F1/ports/8080/api/v1/%2E%2E/x%3Fy")


def test_the_sync_twin_asks_the_same_url_and_raises_the_same_errors():
    asked: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        if len(asked) == 1:
            return httpx.Response(200, json=[{"sandbox_id": "sb-1", "kind": "vm", "idle_s": 3.0}])
        return httpx.Response(503, json={"error": {"code": "unavailable", "message": "busy", "details": []}})

    sync = NodeAgentSyncClient("tok", transport=httpx.MockTransport(handler))
    try:
        assert [a.sandbox_id for a in sync.activity(NODE)] == ["sb-1"]
        with pytest.raises(CorralError) as caught:
            sync.activity(NODE)
    finally:
        sync.close()
    assert caught.value.status_code == 503
    assert asked[0].url == "http://node-1:7000/v1/activity" and asked[0].headers[INTERNAL_TOKEN_HEADER] == "tok"
