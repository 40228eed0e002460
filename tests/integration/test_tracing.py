"""One trace spans api → scheduler → node-agent, carried in AMQP headers.

All services run in this process (their real apps and lifespans, real Redis, RabbitMQ,
EROFS, crun) so an in-memory exporter sees every span.
"""

import asyncio
import os
import shutil
import socket

import httpx
import pytest
import uvicorn
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from corral_common.telemetry import setup_tracing
from tests.polling import until

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("crun") or not shutil.which("mkfs.erofs"),
    reason="runs a real container: needs root, crun and mkfs.erofs",
)

if os.geteuid() == 0 and shutil.which("crun"):
    from corral_host.namespaces import enter_private_mount_namespace

    enter_private_mount_namespace()  # at import: unshare needs a single-threaded process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_one_trace_from_api_to_node_agent(redis_url, amqp_url, tmp_path):
    from corral_api.app import create_app as create_api
    from corral_api.settings import ApiSettings
    from corral_image_service.app import create_app as create_images
    from corral_image_service.builders import build_busybox
    from corral_image_service.settings import ImageServiceSettings
    from corral_node_agent.app import create_app as create_node
    from corral_node_agent.settings import NodeAgentSettings
    from corral_scheduler.app import create_app as create_scheduler
    from corral_scheduler.settings import SchedulerSettings

    exporter = InMemorySpanExporter()
    setup_tracing("corral-test", extra_processor=SimpleSpanProcessor(exporter))

    image_port = free_port()
    images_url = f"http://127.0.0.1:{image_port}"
    images = uvicorn.Server(uvicorn.Config(create_images(ImageServiceSettings(data_dir=str(tmp_path / "images"))),
                                           host="127.0.0.1", port=image_port, log_level="warning"))
    images_task = asyncio.create_task(images.serve())
    common = {"redis_url": redis_url, "amqp_url": amqp_url, "image_service_url": images_url}
    api = create_api(ApiSettings(**common, database_url=f"sqlite:///{tmp_path}/api.db",
                                 keys="tracing:tracing-key-1"))
    scheduler = create_scheduler(SchedulerSettings(**common))
    # Eager layers: image-service shares this test's event loop, so a lazy (FUSE) read issued
    # from that loop could only be answered by the loop it blocks. A capacity registry of its
    # own: in the host's, this node would compete with the agents of a platform running here.
    node = create_node(NodeAgentSettings(**common, node_id="trace-node", state_dir=str(tmp_path / "node"),
                                         port=free_port(), layer_mode="eager",
                                         capacity_registry_dir=str(tmp_path / "capacity")))
    try:
        await until(lambda: images.started, what="image-service started", interval_s=0.01)
        root = build_busybox(tmp_path / "rootfs")
        async with httpx.AsyncClient(base_url=images_url) as client:
            layer = (await client.post("/v1/layers", params={"kind": "base", "name": "busybox", "version": "1",
                                                             "source_dir": str(root)})).json()
            assert (await client.post("/v1/environments", json={"name": "busybox", "base": layer["ref"]})).status_code == 201
        async with api.router.lifespan_context(api), scheduler.router.lifespan_context(scheduler), \
                node.router.lifespan_context(node):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://api",
                                         headers={"authorization": "Bearer tracing-key-1"}) as client:
                created = await client.post("/v1/sandboxes", params={"wait_for": "running", "timeout": 60},
                                            json={"environment": "busybox", "memory_mb": 64})
                assert created.status_code == 202, created.text
                sandbox = created.json()
                assert sandbox["state"] == "running"
                deleted = await client.delete(f"/v1/sandboxes/{sandbox['id']}", params={"wait": True})
                assert deleted.json()["state"] == "terminated"
    finally:
        images.should_exit = True
        await images_task

    spans = exporter.get_finished_spans()
    root_span = next(s for s in spans if s.name == "POST /v1/sandboxes" and s.parent is None)
    trace = {s.name for s in spans if s.context.trace_id == root_span.context.trace_id}
    assert "publish sandbox.requested" in trace
    assert "consume sandbox.requested" in trace  # scheduler
    assert "publish node.trace-node.place" in trace
    assert "consume node.trace-node.place" in trace  # node-agent
    assert "publish sandbox.running" in trace
