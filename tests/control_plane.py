"""A control plane for tests that break things under it: each service as a process of its own
(``python -m ...``, configured only by CORRAL_* env, as in a deployment), so a test can
SIGKILL or restart it; node-agents as the real control path (NodeEvents: place/stop
consumers, heartbeats, SandboxManager and a LayerCache fetching from the image-service) in
the test process over the FakeBackend; and servers of the test's own (scripts/servers.sh, as
CI and `make up` start theirs) that it may stop and start, on this worker's private ports
(tests/ports.py), never the shared ones.
"""

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine

from corral_common.amqp import EventBus
from corral_common.contracts.events import SandboxPlace, SandboxStop, node_queue_name, node_routing_key
from corral_common.store.state import StateStore
from corral_common.web.internal import INTERNAL_TOKEN_HEADER
from corral_node_agent.backends.fake import FakeBackend
from corral_node_agent.backends.types import LayerFormat
from corral_node_agent.capacity.resources import NodeCapacity, Resources
from corral_node_agent.events.service import NodeEvents
from corral_node_agent.layers import LayerCache
from corral_node_agent.sandboxes.service import SandboxManager
from corral_node_agent.settings import NodeAgentSettings
from tests import ports

ROOT = Path(__file__).resolve().parents[1]
SERVERS = str(ROOT / "scripts/servers.sh")
PRIVATE_POSTGRES_PORT = ports.private(60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """One service as a process of its own, logging to a file."""

    def __init__(self, name: str, module: str, env: dict[str, str], port: int, log_dir: Path):
        self.name, self.module, self.env, self.url = name, module, env, f"http://127.0.0.1:{port}"
        self.log = log_dir / f"{name}.log"
        self.start()

    def start(self) -> None:
        with self.log.open("a") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", self.module], env={**os.environ, **self.env},
                                         stdout=out, stderr=subprocess.STDOUT)

    async def healthz(self) -> dict | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited ({self.proc.returncode}):\n{self.log.read_text()[-3000:]}")
        try:
            async with httpx.AsyncClient(timeout=2) as client:
                r = await client.get(f"{self.url}/healthz")
            return r.json() if r.status_code == 200 else None
        except httpx.TransportError:
            return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class FakeNode:
    """The node-agent's control path over the FakeBackend, advertising a URL of its own."""

    def __init__(self, node_id: str, common: dict[str, str], tmp: Path, *, max_sandboxes: int):
        self.node_id = node_id
        self.advertise_url = f"http://{node_id}.nodes.test:8100"
        self.settings = NodeAgentSettings(**common, node_id=node_id, state_dir=str(tmp / node_id), layer_mode="eager",
                                          max_sandboxes=max_sandboxes, disk_capacity_mb=1_000_000,
                                          capacity_registry_dir=str(tmp / "capacity"), heartbeat_interval_s=0.5,
                                          advertise_url=self.advertise_url)
        self.backend = FakeBackend(layer_format=LayerFormat.files)  # layers as files: nothing to mount

    async def start(self) -> None:
        self.manager = SandboxManager(self.backend, LayerCache(self.settings.layers()))
        await self.manager.start()
        self.store = StateStore.from_url(self.settings.redis_url)
        self.bus = await EventBus(self.settings.amqp_url,
                                  publish_timeout_s=self.settings.amqp_publish_timeout_s).connect()
        capacity = NodeCapacity(claim=Resources(16, 100_000, 100_000), cpu=64, memory_mb=100_000, pids=100_000)
        self.events = NodeEvents(self.settings, self.store, self.bus, self.manager, capacity)
        await self.events.heartbeat_once()
        node = self.node_id
        await self.bus.consume(node_queue_name(node, "place"), [node_routing_key(node, "place")], SandboxPlace,
                               self.events.on_place, prefetch=32)
        await self.bus.consume(node_queue_name(node, "stop"), [node_routing_key(node, "stop")], SandboxStop,
                               self.events.on_stop)
        self.heartbeats = asyncio.create_task(self.events.heartbeat_forever())

    async def make_room(self, max_sandboxes: int) -> None:
        self.events.settings = self.settings.model_copy(update={"max_sandboxes": max_sandboxes})
        await self.events.heartbeat_once()

    def calls(self, kind: str) -> list[str]:
        return [sid for call, sid in self.backend.calls if call == kind]

    def starts(self) -> list[str]:
        return self.calls("start")

    async def close(self) -> None:
        self.heartbeats.cancel()
        await self.bus.close()
        await self.manager.close()
        await self.store.close()


def create_database(postgres_url: str, prefix: str) -> str:
    """A fresh database on that server; its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    return postgres_url.rsplit("/", 1)[0] + f"/{name}"


def drop_database(postgres_url: str, url: str) -> None:
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
    admin.dispose()


async def register_environment(images_url: str, token: str, name: str, tmp: Path) -> None:
    """A one-file base layer and an environment on it (the FakeBackend runs nothing)."""
    layer_dir = tmp / f"layer-{name}"
    layer_dir.mkdir()
    (layer_dir / "hello").write_text("hi\n")
    async with httpx.AsyncClient(base_url=images_url, headers={INTERNAL_TOKEN_HEADER: token}) as client:
        layer = await client.post("/v1/layers", params={"kind": "base", "name": name, "version": "1",
                                                        "source_dir": str(layer_dir)})
        assert layer.status_code == 201, layer.text
        env = await client.post("/v1/environments", json={"name": name, "base": layer.json()["ref"]})
        assert env.status_code == 201, env.text


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PrivateRabbitMQ:
    """A RabbitMQ of the test's own (its data in ``state``), to stop and start under a platform.
    A test whose services run on its own event loop calls stop/start in a thread
    (``asyncio.to_thread``): they block for seconds.

    A broker left over by a killed run may still hold this worker's first ports: the first
    start takes the first of a few candidates that are free, and a restart (same node, same
    port) waits for its own."""

    CANDIDATES = tuple(ports.private(ports.BROKER_SPAN * k) for k in range(5))

    def __init__(self, state: Path):
        self.state, self.port, self.url = str(state), 0, ""

    @staticmethod
    def _ports_free(port: int) -> bool:
        return all(_free(p) for p in ports.broker_ports(port))

    def start(self) -> str:
        if self.port:
            deadline = time.monotonic() + 30
            while not self._ports_free(self.port) and time.monotonic() < deadline:
                time.sleep(0.2)
            return self._start(self.port)
        error = None
        for port in self.CANDIDATES:
            if not self._ports_free(port):
                continue
            try:
                return self._start(port)
            except subprocess.CalledProcessError as exc:
                error = exc
                self.stop()
                shutil.rmtree(Path(self.state) / "rabbitmq", ignore_errors=True)
        raise RuntimeError(f"no private RabbitMQ could start on {self.CANDIDATES}: {error}")

    def _start(self, port: int) -> str:
        self.port = port
        out = subprocess.run([SERVERS, "start-rabbitmq", self.state, str(port)], check=True,
                             capture_output=True, text=True)
        self.url = out.stdout.split()[-1]
        return self.url

    def stop(self) -> None:
        subprocess.run([SERVERS, "stop-rabbitmq", self.state], check=True, capture_output=True)


class PrivatePostgres:
    """A PostgreSQL of the test's own (its own data dir, which the postgres user can reach), to
    stop and start under a platform."""

    def __init__(self, port: int = PRIVATE_POSTGRES_PORT):
        self.state = Path(tempfile.mkdtemp(prefix="corral-private-pg-"))
        self.state.chmod(0o755)
        self.port, self.url = port, ""

    def start(self) -> str:
        out = subprocess.run([SERVERS, "start-postgres", str(self.state), str(self.port)], check=True,
                             capture_output=True, text=True)
        self.url = out.stdout.split()[-1]
        return self.url

    def stop(self) -> None:
        subprocess.run([SERVERS, "stop-postgres", str(self.state)], check=True, capture_output=True)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.state, ignore_errors=True)


@pytest.fixture
def private_broker():
    """A running PrivateRabbitMQ, removed after the test."""
    server = PrivateRabbitMQ(Path(tempfile.mkdtemp(prefix="corral-private-mq-")))
    server.start()
    yield server
    server.stop()
    shutil.rmtree(server.state, ignore_errors=True)
