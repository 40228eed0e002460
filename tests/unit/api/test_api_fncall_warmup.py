"""A call no worker serves says why: warming up (503 fncall_warming_up, Retry-After 5, what each
node waits for) while some node's pools are not ready, unavailable otherwise."""

import asyncio

import pytest

from corral_api.fncall.service import FncallService
from corral_api.fncall.settings import FncallApiSettings
from corral_api.fncall.warmup import FncallWarmup
from corral_common.contracts.node import FncallPoolsStatus
from corral_common.store.state_nodes import NodeInfo
from corral_common.web.errors import ServiceUnavailable


class Rpc:
    def __init__(self, consumers: int):
        self.n = consumers

    async def consumers(self, runtime: str) -> int:
        return self.n


class Store:
    def __init__(self, nodes: list[str]):
        self.nodes = [NodeInfo(node_id=n, url=f"http://{n}:1", cpu_milli=1000, memory_mb=1, max_sandboxes=1,
                               heartbeat_at=0.0) for n in nodes]

    async def live_nodes(self, timeout_s: float) -> list[NodeInfo]:
        return self.nodes


class Nodes:
    """The NodeAgentClient's fncall_pools, answering each node as told."""

    def __init__(self, answers: dict[str, dict]):
        self.answers = answers
        self.asked = 0

    async def fncall_pools(self, node: str) -> FncallPoolsStatus:
        self.asked += 1
        await asyncio.sleep(0)
        answer = self.answers[node.split("//")[1].split(":")[0]]
        return FncallPoolsStatus.model_validate({**answer, "pools": [pool(**p) for p in answer["pools"]]})


def pool(runtime: str) -> dict:
    return {"runtime": runtime, "size": 1, "busy": 0, "min": 1, "max": 4, "queue_depth": 0, "warm": False,
            "calls_per_second": 0.0}


def service(consumers: int, answers: dict[str, dict]) -> tuple[FncallService, Nodes]:
    nodes = Nodes(answers)
    warmup = FncallWarmup(Store(list(answers)), nodes, heartbeat_timeout_s=10)
    return FncallService(rpc=Rpc(consumers), redis=None, settings=FncallApiSettings(), warmup=warmup), nodes


async def test_a_call_while_the_pools_warm_up_is_told_what_they_wait_for():
    fncall, _ = service(0, {"node-1": {"status": "waiting for environment 'judge' in image-service", "pools": []},
                            "node-2": {"status": "ready", "pools": [{"runtime": "python"}]}})
    with pytest.raises(ServiceUnavailable) as caught:
        await fncall.require_workers("python", ["body", "runtime"])
    error = caught.value
    assert error.code == "fncall_warming_up" and error.response_headers() == {"Retry-After": "5"}
    assert "'python' is warming up" in error.message and "node-1: waiting for environment 'judge'" in error.message
    assert error.loc == ["body", "runtime"]


async def test_a_runtime_no_ready_node_has_is_unavailable_not_warming():
    fncall, _ = service(0, {"node-1": {"status": "ready", "pools": [{"runtime": "python"}]}})
    with pytest.raises(ServiceUnavailable) as caught:
        await fncall.require_workers("rust", ["body", "runtime"])
    assert caught.value.code == "fncall_unavailable"
    assert "node-1: ready without a rust pool" in caught.value.message


async def test_a_burst_asks_each_node_once():
    fncall, nodes = service(0, {"node-1": {"status": "starting", "pools": []}})
    results = await asyncio.gather(*(fncall.require_workers("python", ["body"]) for _ in range(50)),
                                   return_exceptions=True)
    assert all(isinstance(r, ServiceUnavailable) and r.code == "fncall_warming_up" for r in results)
    assert nodes.asked == 1


async def test_served_runtimes_ask_no_node():
    fncall, nodes = service(2, {"node-1": {"status": "starting", "pools": []}})
    await fncall.require_workers("python", ["body"])
    assert nodes.asked == 0
