"""The platform schemathesis fuzzes: image-service, api, scheduler and a node-agent, each its
real app served by uvicorn on loopback (its own thread and event loop), on real Redis,
RabbitMQ, SQLite, EROFS. What differs from production: the node-agent runs a FakeBackend
(nothing is started, so thousands of requests stay cheap: corral_node_agent/backends/fake.py),
and the fncall work queues are served by a stub worker that answers every call with a
system_error result (the real pools need the judge runtime tree, minutes to build).

Sandboxes run on the fake node from the start, one for the api's run and one for the
node-agent's; the data-path operations are pointed at them (schemathesis ``parameters``), so
their bodies and queries reach the node instead of stopping at a 404.

The node-agent needs the private mount namespace (it mounts the environment's EROFS layer):
this conftest enters it at import, while the process is single-threaded.
"""

import asyncio
import io
import os
import shutil
import socket
import tarfile
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

from corral_common.web.serving import GRACEFUL_SHUTDOWN_S
from tests.polling import until_sync
from tests.sandbox_host import container_skip_reason

SKIP_REASON = container_skip_reason() if os.geteuid() == 0 else "the node-agent mounts EROFS layers: needs root"
API_KEY = "fuzz-key-0123456789"
TOKEN = "fuzz-internal-token"
TENANT = "fuzz"
OTHER_KEY = "fuzz-other-key-0123456789"
# The tenant of tests/integration/contract_fuzz/test_bad_input.py: it must end with nothing.
INPUTS_TENANT, INPUTS_KEY = "inputs", "inputs-key-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(app, what: str, port: int | None = None):
    """``app`` (lifespan and all) served on loopback (``port``, or a free one); yields its base URL."""
    port = port or free_port()
    # A bounded graceful shutdown, as the services have (corral_common.web.serving): a fuzzed request
    # with a long timeout would otherwise hold the teardown, and the session's exit, for as long.
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           log_config=None, access_log=False,
                                           timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S))
    thread = threading.Thread(target=server.run, name=f"fuzz-{what}", daemon=True)
    thread.start()
    until_sync(lambda: server.started or not thread.is_alive(), 60, f"{what} to start", 0.02)
    if not server.started:
        raise AssertionError(f"{what} did not start (its lifespan failed: see the log)")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


class StubFncallWorker:
    """Consumes every fncall work queue (its own thread and loop) and answers each call, or each
    call of a bundle, with a system_error result: the api's whole path (validation, publish,
    reply, batch bookkeeping) runs; no code does."""

    def __init__(self, amqp_url: str):
        self.amqp_url = amqp_url
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzz-fncall", daemon=True)

    def __enter__(self) -> "StubFncallWorker":
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.connection.close(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)

    async def _start(self) -> None:
        import aio_pika

        from corral_common.contracts.fncall import RUNTIMES, declare_work_queue

        self.connection = await aio_pika.connect_robust(self.amqp_url)
        channel = await self.connection.channel()
        for runtime in RUNTIMES:
            queue = await declare_work_queue(self.connection, channel, runtime)
            await queue.purge()  # calls an earlier run left unanswered
            await queue.consume(self._answer(channel, runtime))

    @staticmethod
    def _answer(channel, runtime: str):
        import aio_pika

        from corral_common.contracts.fncall import (
            BUNDLE,
            FncallJob,
            FncallResult,
            JobBundle,
            ResultBundle,
            Verdict,
        )

        def result(job: FncallJob) -> FncallResult:
            return FncallResult(call_id=job.call_id, runtime=runtime, verdict=Verdict.system_error,
                                message="the fuzz run's stub worker runs nothing")

        async def on_message(message) -> None:
            async with message.process():
                if message.type == BUNDLE:
                    body = ResultBundle(results=[result(j) for j in JobBundle.model_validate_json(message.body).jobs]).body()
                else:
                    body = result(FncallJob.model_validate_json(message.body)).body()
                await channel.default_exchange.publish(
                    aio_pika.Message(body=body, correlation_id=message.correlation_id, content_type="application/json"),
                    routing_key=message.reply_to)

        return on_message


def busybox_tar(root: Path) -> bytes:
    from corral_image_service.builders import build_busybox

    build_busybox(root)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.add(root, arcname=".")
    return buf.getvalue()


@pytest.fixture(scope="session")
def fuzz_platform(service_urls, tmp_path_factory):
    """URLs of the running services and the id of the running sandbox, for the fuzz tests."""
    if SKIP_REASON:
        pytest.skip(SKIP_REASON)
    if shutil.which("mkfs.erofs") is None:
        pytest.skip("image-service builds EROFS layers: needs mkfs.erofs")
    import redis

    from corral_api.app import create_app as create_api
    from corral_api.settings import ApiSettings
    from corral_image_service.app import create_app as create_images
    from corral_image_service.settings import ImageServiceSettings
    from corral_node_agent.app import create_app as create_node
    from corral_node_agent.backends.fake import FakeBackend
    from corral_node_agent.fncall.settings import FncallNodeSettings
    from corral_node_agent.settings import NodeAgentSettings
    from corral_scheduler.app import create_app as create_scheduler
    from corral_scheduler.settings import SchedulerSettings

    tmp = tmp_path_factory.mktemp("fuzz")
    urls = service_urls["isolated"](3, "fuzz")  # a Redis db and vhost no other test uses
    redis.Redis.from_url(urls["redis_url"]).flushdb()
    images = create_images(ImageServiceSettings(data_dir=str(tmp / "images"), allow_source_dir=False,
                                                internal_token=TOKEN, log_json=False, log_level="WARNING"))
    with served(images, "image-service") as images_url:
        tar = busybox_tar(tmp / "rootfs")
        with httpx.Client(base_url=images_url, headers={"x-corral-internal-token": TOKEN}, timeout=60) as c:
            layer = c.post("/v1/layers", params={"kind": "base", "name": "busybox", "version": "1"}, content=tar,
                           headers={"content-type": "application/x-tar"})
            assert layer.status_code == 201, layer.text
            created = c.post("/v1/environments", json={"name": "busybox", "base": layer.json()["ref"]})
            assert created.status_code == 201, created.text
        common = {**{k: urls[k] for k in ("redis_url", "amqp_url")}, "image_service_url": images_url,
                  "internal_token": TOKEN, "log_json": False, "log_level": "WARNING"}
        node_id = f"fuzz-{uuid.uuid4().hex[:6]}"
        node_port = free_port()
        node = create_node(NodeAgentSettings(**common, node_id=node_id, port=node_port, disk_capacity_mb=100_000,
                                             state_dir=str(tmp / "node"), layer_mode="eager",
                                             capacity_registry_dir=str(tmp / "capacity"), adopt_on_start=False,
                                             # The stub worker answers fncall: no warm pools polling for a judge tree.
                                             fncall=FncallNodeSettings(enabled=False)),
                           backends=(backend := FakeBackend()))
        api = create_api(ApiSettings(**common, database_url=f"sqlite:///{tmp}/api.db", keys=f"{TENANT}:{API_KEY},other:{OTHER_KEY},{INPUTS_TENANT}:{INPUTS_KEY}",
                                     max_wait_s=0.5))
        with StubFncallWorker(urls["amqp_url"]), served(create_scheduler(SchedulerSettings(**common)), "scheduler"), \
                served(node, "node-agent", node_port) as node_url, served(api, "api") as api_url:
            running = {}
            # One each, the node-agent's of another tenant: the api's run may well delete the
            # sandboxes it sees (schemathesis reuses the ids responses show, in every operation).
            for target, key in (("api", API_KEY), ("node-agent", OTHER_KEY)):
                sandbox = httpx.post(f"{api_url}/v1/sandboxes", params={"wait_for": "running", "timeout": 30},
                                     json={"environment": "busybox"}, headers={"authorization": f"Bearer {key}"},
                                     timeout=60)
                assert sandbox.status_code == 202 and sandbox.json()["state"] == "running", sandbox.text
                running[target] = sandbox.json()["id"]
            yield {"image-service": images_url, "api": api_url, "node-agent": node_url, "sandboxes": running,
                   "backend": backend, "redis_url": urls["redis_url"]}

