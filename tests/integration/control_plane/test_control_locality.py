"""Image locality on the real control plane in this process: api, scheduler, image-service and
two node-agents (FakeBackend sandboxes on real eager layer downloads), over real Redis and
RabbitMQ. A node reports the layers it holds with its heartbeat; a sandbox of that environment
then goes to it even when the other node is emptier, and by load alone without locality."""

import uuid
from contextlib import AsyncExitStack

import httpx
import pytest

from corral_api.app import create_app as api_app
from corral_api.settings import ApiSettings
from corral_common.store.state import StateStore
from corral_common.web.internal import INTERNAL_TOKEN_HEADER
from corral_image_service.app import create_app as image_app
from corral_node_agent import app as node_app_module
from corral_node_agent.backends.fake import FakeBackend
from corral_node_agent.backends.types import LayerFormat
from corral_node_agent.fncall.settings import FncallNodeSettings
from corral_node_agent.settings import NodeAgentSettings
from corral_scheduler.app import create_app as scheduler_app
from corral_scheduler.settings import SchedulerSettings
from tests.inprocess import loopback_socket, serve
from tests.integration.image_service.helpers import image_settings, make_tree, tar_of
from tests.polling import until

TOKEN = "internal-token-for-the-locality-test"
KEY = "locality-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
async def plane(redis_url, amqp_url, tmp_path):
    common = {"redis_url": redis_url, "amqp_url": amqp_url, "internal_token": TOKEN, "log_json": False,
              "log_level": "WARNING", "heartbeat_interval_s": 0.2, "heartbeat_timeout_s": 30.0}
    async with AsyncExitStack() as stack:
        images = await stack.enter_async_context(serve(image_app(image_settings(
            tmp_path / "images", internal_token=TOKEN, redis_url=redis_url, amqp_url=amqp_url))))
        async with httpx.AsyncClient(base_url=images, headers={INTERNAL_TOKEN_HEADER: TOKEN}, timeout=60) as c:
            tree = make_tree(tmp_path / "tree", {"bin/true": "#!/bin/sh\n", "etc/os-release": "ID=locality\n"})
            layer = await c.post("/v1/layers", params={"kind": "base", "name": "warm", "version": "1"},
                                 content=tar_of(tree), headers={"Content-Type": "application/x-tar"})
            assert (await c.post("/v1/environments", json={"name": "warm", "base": "warm:1"})).status_code == 201
        scheduler = scheduler_app(SchedulerSettings(image_service_url=images, placement_locality_min_mb=0, **common))
        await stack.enter_async_context(serve(scheduler))
        prefix = uuid.uuid4().hex[:6]
        for name in ("a", "b"):  # equal nodes: a ties first
            sock = loopback_socket()
            settings = NodeAgentSettings(
                node_id=f"loc-{prefix}-{name}", host="127.0.0.1", port=sock.getsockname()[1],
                state_dir=str(tmp_path / f"node-{name}"), capacity_registry_dir=str(tmp_path / f"reg-{name}"),
                cpu_capacity=4, memory_capacity_mb=8192, pids_capacity=20_000, disk_capacity_mb=100_000,
                layer_mode="eager", image_service_url=images, fncall=FncallNodeSettings(enabled=False), **common)
            backend = FakeBackend(layer_format=LayerFormat.files)
            await stack.enter_async_context(serve(node_app_module.create_app(settings, backend), sock))
        api = await stack.enter_async_context(serve(api_app(ApiSettings(
            database_url=f"sqlite:///{tmp_path}/api.db", image_service_url=images, keys=f"loc:{KEY}", **common))))
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=api, timeout=60))
        store = StateStore.from_url(redis_url)
        stack.push_async_callback(store.close)
        yield http, scheduler, store, layer.json()["digest"], (f"loc-{prefix}-a", f"loc-{prefix}-b")


async def create(http, **extra) -> dict:
    r = await http.post("/v1/sandboxes", params={"wait_for": "running", "timeout": 30}, headers=AUTH,
                        json={"environment": "warm", "memory_mb": 64, "cpu": 0.1, "disk_mb": 64, **extra})
    assert r.status_code == 202 and r.json()["state"] == "running", r.text
    return r.json()


async def test_a_sandbox_goes_where_its_layers_are(plane):
    http, scheduler, store, digest, (node_a, node_b) = plane
    await until(lambda: _live(store, 2), timeout_s=30, what="both nodes live")
    first = await create(http)
    assert first["node_id"] == node_a  # equal load: the node id decides
    held = await until(lambda: _held(store, [node_a, node_b], digest), timeout_s=30, what="node a to report it")
    assert node_a in held and node_b not in held
    # a is busier now (one sandbox), b empty: by load alone b; a holds every byte: a.
    second = await create(http)
    assert second["node_id"] == node_a
    scheduler.state.services.placer.environments = None  # locality off: load decides
    third = await create(http)
    assert third["node_id"] == node_b


async def _live(store, n):
    return len(await store.live_nodes(30.0)) >= n


async def _held(store, nodes, digest):
    held = await store.held_layers(nodes, [digest])
    return {node for node, layers in held.items() if layers.get(digest)} or None


class AskedNothing:
    """The placer's image-service lookups, counted: a pinned record must need none."""

    def __init__(self, environments) -> None:
        self.environments, self.asked = environments, []

    async def sizes(self, tenant, spec):
        self.asked.append(spec.environment)
        return await self.environments.sizes(tenant, spec)


async def test_a_pinned_sandbox_is_placed_by_its_pin_without_asking_image_service(plane):
    http, scheduler, store, digest, (node_a, node_b) = plane
    await until(lambda: _live(store, 2), timeout_s=30, what="both nodes live")
    first = await create(http)
    assert first["node_id"] == node_a
    await until(lambda: _held(store, [node_a, node_b], digest), timeout_s=30, what="node a to report it")
    spy = scheduler.state.services.placer.environments = AskedNothing(scheduler.state.services.placer.environments)
    second = await create(http)
    record = await store.get_sandbox(second["id"])
    assert [layer.digest for layer in record.image.layers] == [digest]  # the api's pin
    assert second["node_id"] == node_a  # by locality (by load alone: b)...
    assert spy.asked == []  # ...read from the pin, not image-service
