"""The node-agent's replies, now declared as contract models, are the bytes its callers always
read: the same keys, in the same order, with nothing added (an older api or memory-manager
reads them unchanged). The app without its lifespan, on a stand-in manager."""

import json
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from corral_common.contracts.network import NetworkPolicy
from corral_common.contracts.sandboxes import SandboxState


class Manager:
    def count(self) -> int:
        return 2

    def kinds(self) -> list[str]:
        return ["container", "microvm"]

    async def set_network(self, sandbox_id: str, network: NetworkPolicy) -> None:
        pass

    async def network_state(self, sandbox_id: str) -> dict:
        return {"counters": {"tx_bytes": 10, "rx_bytes": 20, "denied": 1},
                "denied": [{"at": 1733600000.25, "target": "example.com:443", "reason": "not allowed"}]}


class Events:
    async def pause(self, sandbox_id: str) -> SandboxState:
        return SandboxState.paused

    async def resume(self, sandbox_id: str) -> SandboxState:
        return SandboxState.running


@pytest.fixture
def node(tmp_path):
    from corral_node_agent.app import create_app
    from corral_node_agent.settings import NodeAgentSettings

    app = create_app(NodeAgentSettings(node_id="n1", state_dir=str(tmp_path), log_json=False))
    app.state.services = SimpleNamespace(manager=Manager(), events=Events(), fncall=None)
    return TestClient(app)


def compact(body) -> bytes:
    """What FastAPI sent for a dict reply (Starlette's JSONResponse)."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()


def test_pause_and_resume_answer_the_state(node):
    assert node.post("/v1/sandboxes/sb-1/pause").content == b'{"state":"paused"}'
    assert node.post("/v1/sandboxes/sb-1/resume").content == b'{"state":"running"}'


def test_network_replies_are_unchanged(node):
    policy = NetworkPolicy(allow=["pypi.org:443"], presets=[], bandwidth_mbit=5)
    put = node.put("/v1/sandboxes/sb-1/network", content=policy.model_dump_json(),
                   headers={"content-type": "application/json"})
    assert put.content == compact({"network": policy.model_dump(mode="json")})
    got = node.get("/v1/sandboxes/sb-1/network")
    assert got.content == compact({"counters": {"tx_bytes": 10, "rx_bytes": 20, "denied": 1},
                                   "denied": [{"at": 1733600000.25, "target": "example.com:443",
                                               "reason": "not allowed"}]})


def test_an_unattached_sandbox_has_empty_counters(node):
    async def empty(sandbox_id: str) -> dict:
        return {"counters": {}, "denied": []}

    node.app.state.services.manager.network_state = empty
    assert node.get("/v1/sandboxes/sb-1/network").content == b'{"counters":{},"denied":[]}'


def test_fncall_pools_and_health(node):
    assert node.get("/v1/fncall/pools").content == b'{"status":"not started","pools":[]}'  # no node_id yet

    class Pools:
        def status(self) -> dict:
            return {"node_id": "n1", "status": "ready", "pools": [
                {"runtime": "python", "size": 2, "busy": 1, "min": 1, "max": 8, "queue_depth": 0, "warm": True,
                 "calls_per_second": 0.5}]}

    node.app.state.services.fncall = Pools()
    assert node.get("/v1/fncall/pools").content == compact(Pools().status())
    assert node.get("/healthz").content == compact({"status": "ok", "node_id": "n1", "sandboxes": 2,
                                                    "backends": ["container", "microvm"]})
