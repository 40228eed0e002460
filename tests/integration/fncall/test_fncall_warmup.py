"""A call made while a node's fncall pools warm up is answered 503 fncall_warming_up at once,
with Retry-After and what the node waits for, as the node-agent's own pools report it (its
real fncall router served over HTTP, its node record in Redis, an api FncallService on RabbitMQ
with no consumer for the runtime yet)."""

import time
import uuid
from types import SimpleNamespace

import pytest
from fastapi import FastAPI

from corral_api.fncall.rpc import FncallRpc
from corral_api.fncall.schemas import FncallRequest
from corral_api.fncall.service import FncallService
from corral_api.fncall.settings import FncallApiSettings
from corral_api.fncall.warmup import FncallWarmup
from corral_common.contracts.node_client import NodeAgentClient
from corral_common.store.state import StateStore
from corral_common.web.errors import ServiceUnavailable
from corral_node_agent.errors import ImageUnavailable
from corral_node_agent.fncall.router import router as fncall_router
from corral_node_agent.fncall.service import FncallPools, instance_of
from corral_node_agent.settings import NodeAgentSettings
from tests.inprocess import serve
from tests.polling import until

TOKEN = "internal-token-for-the-warmup-test"


class JudgeNotThereYet:
    """The node's layer cache while image-service has no judge environment yet."""

    async def resolve_environment(self, name: str):
        raise ImageUnavailable(f"environment {name!r} not found")

    def add_exit_listener(self, listener) -> None:
        pass


async def test_a_call_while_a_node_warms_up_says_what_it_waits_for(redis_url, amqp_url, tmp_path):
    node_id = f"warm-{uuid.uuid4().hex[:6]}"
    settings = NodeAgentSettings(node_id=node_id, state_dir=str(tmp_path), amqp_url=amqp_url, internal_token=TOKEN,
                                 fncall={"runtimes": "python", "rootfs_poll_s": 0.2})
    node = FastAPI()
    node.state.settings = settings
    # The node's pools as its composition root builds them (corral_node_agent.app), on the layer cache above.
    pools = FncallPools(node_id, amqp_url, settings.fncall, instance=instance_of(settings.state_dir),
                        layers=JudgeNotThereYet(), publish_timeout_s=settings.amqp_publish_timeout_s)
    node.state.services = SimpleNamespace(fncall=pools)
    node.include_router(fncall_router)
    store = StateStore.from_url(redis_url)
    runtime = "python"
    rpc = await FncallRpc(amqp_url, (runtime,)).connect()
    nodes = NodeAgentClient(TOKEN)
    try:
        await pools.start()
        async with serve(node) as url:
            await until(lambda: "waiting for environment" in pools.status_message, timeout_s=30,
                        what="the node's pools to wait for the judge")
            await store.redis.delete("nodes")  # only this node is live
            await store.heartbeat(node_id, url, 1, 1000, 10)
            service = FncallService(rpc, None, FncallApiSettings(), FncallWarmup(store, nodes, heartbeat_timeout_s=30))
            started = time.monotonic()
            with pytest.raises(ServiceUnavailable) as caught:
                await service.call(FncallRequest(runtime=runtime, code="print(1)"))
            assert time.monotonic() - started < 5
            error = caught.value
            assert error.code == "fncall_warming_up" and error.loc == ["body", "runtime"]
            assert error.response_headers() == {"Retry-After": "5"}
            assert f"runtime {runtime!r} is warming up" in error.message
            assert f"{node_id}: waiting for environment 'judge'" in error.message, error.message
    finally:
        await pools.close()
        await nodes.aclose()
        await rpc.close()
        await store.redis.delete(f"node:{node_id}")
        await store.redis.zrem("nodes", node_id)
        await store.close()
