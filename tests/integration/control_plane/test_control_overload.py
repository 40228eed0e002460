"""Overload and internal surfaces, on the real control plane in this process: the api,
scheduler, image-service and a node-agent (its sandboxes on the shipped FakeBackend, whose
exec takes EXEC_S like a short command), each served by uvicorn on its own loopback port,
over real Redis and RabbitMQ, every internal call carrying the internal token.

- One tenant's burst of 1,000 concurrent execs gets only 200/429/503 (JSON, Retry-After; no
  500, no reset), while another tenant's requests at the same time all succeed.
- A Redis pool with no free connection in time is a 503 ``overloaded``, not a 500.
- The api's pool to node-agents, full for longer than its wait, is a PoolTimeout (the 503 row).
- Every internal service answers 401 JSON without the token and 200 with it.
"""

import asyncio
import time
import uuid
from contextlib import AsyncExitStack

import httpx
import pytest

from corral_api.app import create_app as api_app
from corral_api.settings import ApiSettings
from corral_common.contracts.node import ExecRequest, ExecResult
from corral_common.contracts.node_client import NodeAgentClient
from corral_common.web.errors import Overloaded
from corral_common.web.internal import INTERNAL_TOKEN_HEADER
from corral_common.web.overload import as_unavailable
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

TOKEN = "internal-token-for-the-overload-test"
KEYS = {"tenant-a": "key-a-0123456789", "tenant-b": "key-b-0123456789"}
EXEC_S = 0.4  # each exec holds its slot this long
TENANT_MAX_INFLIGHT = 50
BURST = 1000
CLIENT_CONNECTIONS = 10
INTERNAL = {INTERNAL_TOKEN_HEADER: TOKEN}


def bearer(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


class SlowExecBackend(FakeBackend):
    """The FakeBackend whose exec takes EXEC_S (a short command), so requests overlap; execs in
    the sandbox ``held`` wait for ``release`` (a burst kept in flight as long as a test wants)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.held: str | None = None
        self.release = asyncio.Event()

    async def exec(self, sandbox_id, req):
        if sandbox_id == self.held:
            await self.release.wait()
        else:
            await asyncio.sleep(EXEC_S)
        return await super().exec(sandbox_id, req)


class Plane:
    def __init__(self, urls: dict[str, str], api, node_settings: NodeAgentSettings, backend: SlowExecBackend):
        self.urls, self.api, self.node_settings, self.backend = urls, api, node_settings, backend


async def start_plane(stack: AsyncExitStack, tmp_path, redis_url: str, amqp_url: str, monkeypatch,
                      **api_overrides) -> Plane:
    # Every service shares this one event loop with the 1,000-request burst, which can stall the
    # node's heartbeats for seconds on a loaded machine: a node declared lost is not this test's point.
    common = {"redis_url": redis_url, "amqp_url": amqp_url, "internal_token": TOKEN, "log_json": False,
              "log_level": "WARNING", "heartbeat_timeout_s": 120.0}
    urls: dict[str, str] = {}
    urls["image-service"] = await stack.enter_async_context(serve(image_app(image_settings(
        tmp_path / "images", internal_token=TOKEN, redis_url=redis_url, amqp_url=amqp_url))))
    tree = make_tree(tmp_path / "tree", {"bin/true": "#!/bin/sh\n", "etc/os-release": "ID=overload\n"})
    async with httpx.AsyncClient(base_url=urls["image-service"], headers=INTERNAL, timeout=60) as images:
        layer = await images.post("/v1/layers", params={"kind": "base", "name": "tiny", "version": "1"},
                                  content=tar_of(tree), headers={"Content-Type": "application/x-tar"})
        assert layer.status_code in (200, 201), layer.text
        env = await images.post("/v1/environments", json={"name": "tiny", "base": layer.json()["ref"]})
        assert env.status_code in (200, 201), env.text
    urls["scheduler"] = await stack.enter_async_context(serve(scheduler_app(SchedulerSettings(**common))))

    node_sock = loopback_socket()
    node_settings = NodeAgentSettings(
        node_id=f"load-{uuid.uuid4().hex[:6]}", host="127.0.0.1", port=node_sock.getsockname()[1],
        state_dir=str(tmp_path / "node"), capacity_registry_dir=str(tmp_path / "registry"), cpu_capacity=2,
        memory_capacity_mb=8192, pids_capacity=20_000, disk_capacity_mb=100_000, layer_mode="eager",
        image_service_url=urls["image-service"], fncall=FncallNodeSettings(enabled=False), **common)
    backend = SlowExecBackend(layer_format=LayerFormat.files)
    urls["node"] = await stack.enter_async_context(serve(node_app_module.create_app(node_settings, backend), node_sock))

    api = api_app(ApiSettings(database_url=f"sqlite:///{tmp_path}/api.db", image_service_url=urls["image-service"],
                              keys=",".join(f"{t}:{k}" for t, k in KEYS.items()), **{**common, **api_overrides}))
    urls["api"] = await stack.enter_async_context(serve(api))
    return Plane(urls, api, node_settings, backend)


@pytest.fixture
async def plane(redis_url, amqp_url, tmp_path, monkeypatch):
    async with AsyncExitStack() as stack:
        yield await start_plane(stack, tmp_path, redis_url, amqp_url, monkeypatch,
                                tenant_max_inflight=TENANT_MAX_INFLIGHT)


async def running_sandbox(http: httpx.AsyncClient, tenant: str) -> str:
    r = await http.post("/v1/sandboxes", params={"wait_for": "running", "timeout": 30}, headers=bearer(tenant),
                        json={"environment": "tiny", "cpu": 0.1, "memory_mb": 64, "disk_mb": 64})
    assert r.status_code == 202 and r.json()["state"] == "running", r.text
    return r.json()["id"]


def assert_error_shape(response: httpx.Response) -> None:
    assert response.headers["content-type"].startswith("application/json"), response.text
    assert set(response.json()["error"]) >= {"code", "message", "details"}
    assert int(response.headers["Retry-After"]) >= 1


async def test_one_tenants_burst_of_1000_execs_leaves_another_tenant_untouched(plane):
    api = plane.urls["api"]
    async with httpx.AsyncClient(base_url=api, timeout=60) as setup:
        sandbox_a = await running_sandbox(setup, "tenant-a")
        sandbox_b = await running_sandbox(setup, "tenant-b")
    # A's admitted execs stay in flight until B is done: B is served while A holds its slots.
    plane.backend.held = sandbox_a

    # Tenant A: every request on a connection of its own, all at once. Spread over clients of
    # CLIENT_CONNECTIONS each: one httpx pool of 1,000 connections costs O(n^2) in the client alone.
    burst_clients = [httpx.AsyncClient(base_url=api, timeout=60, headers=bearer("tenant-a"),
                                       limits=httpx.Limits(max_connections=CLIENT_CONNECTIONS))
                     for _ in range(BURST // CLIENT_CONNECTIONS)]
    bystander = httpx.AsyncClient(base_url=api, timeout=60, headers=bearer("tenant-b"))
    started = asyncio.Event()

    a_done = [0.0] * BURST  # when each of A's requests got its answer

    async def a_exec(client: httpx.AsyncClient, i: int) -> httpx.Response | Exception:
        try:
            return await client.post(f"/v1/sandboxes/{sandbox_a}/exec", json={"cmd": "true"})
        except httpx.HTTPError as exc:  # a reset or a timeout: counted as a failure below
            return exc
        finally:
            a_done[i] = time.monotonic()

    async def b_worker(n: int) -> list[tuple[httpx.Response, float]]:
        await started.wait()
        answers = []
        for i in range(n):
            t0 = time.monotonic()
            if i % 3 == 2:
                r = await bystander.get(f"/v1/sandboxes/{sandbox_b}")
            else:
                r = await bystander.post(f"/v1/sandboxes/{sandbox_b}/exec", json={"cmd": "true"})
            answers.append((r, time.monotonic() - t0))
        return answers

    t0 = time.monotonic()
    burst = [asyncio.create_task(a_exec(burst_clients[i % len(burst_clients)], i)) for i in range(BURST)]
    limiter = plane.api.state.services.tenant_limiter
    await until(lambda: limiter.inflight("tenant-a") == TENANT_MAX_INFLIGHT, timeout_s=60,
                what="tenant A's burst to hold every slot it may")
    started.set()
    workers = [asyncio.create_task(b_worker(6)) for _ in range(5)]
    b_results = [answer for worker in await asyncio.gather(*workers) for answer in worker]
    b_finished = time.monotonic()
    plane.backend.release.set()
    a_results = await asyncio.gather(*burst)
    elapsed = time.monotonic() - t0
    for client in burst_clients:
        await client.aclose()
    await bystander.aclose()

    failures = [r for r in a_results if isinstance(r, Exception)]
    assert failures == [], f"{len(failures)} of tenant A's requests failed on the wire: {failures[:3]!r}"
    statuses = {code: sum(1 for r in a_results if r.status_code == code) for code in {r.status_code for r in a_results}}
    assert set(statuses) <= {200, 429, 503}, (statuses, [r.text for r in a_results if r.status_code not in (200, 429)][:3])
    assert statuses.get(429, 0) > 0 and statuses.get(200, 0) >= TENANT_MAX_INFLIGHT, statuses
    for r in a_results:
        if r.status_code != 200:
            assert_error_shape(r)
    refused = next(r for r in a_results if r.status_code == 429)
    assert refused.json()["error"]["code"] == "tenant_concurrency_limit"
    assert [r.status_code for r, _ in b_results] == [200] * len(b_results), [r.text for r, _ in b_results]
    admitted_done = [t for r, t in zip(a_results, a_done, strict=True) if r.status_code == 200]
    assert min(admitted_done) >= b_finished  # B was served in full while A held every slot it may
    assert plane.api.state.services.tenant_limiter.inflight("tenant-a") == 0  # every slot came back
    b_latency = sorted(s for _, s in b_results)
    print(f"\nburst of {BURST}: {statuses} in {elapsed:.1f}s; tenant B {len(b_results)}x200, "
          f"latency p50 {b_latency[len(b_latency) // 2]:.2f}s max {b_latency[-1]:.2f}s")


async def test_a_redis_pool_with_no_free_connection_is_a_503_not_a_500(redis_url, amqp_url, tmp_path, monkeypatch):
    async with AsyncExitStack() as stack:
        plane = await start_plane(stack, tmp_path, redis_url, amqp_url, monkeypatch, redis_max_connections=2,
                                  redis_pool_timeout_s=0.3)
        redis = plane.api.state.services.store.redis
        async with httpx.AsyncClient(base_url=plane.urls["api"], timeout=30, headers=bearer("tenant-b")) as http:
            assert (await http.get("/v1/sandboxes")).status_code == 200
            # Both connections of the api's pool busy for 3 s (blocking pops on empty lists).
            holders = [asyncio.create_task(redis.blpop([f"nothing-{i}"], timeout=3)) for i in range(2)]

            async def refused() -> httpx.Response | None:
                r = await http.get("/v1/sandboxes")
                return r if r.status_code != 200 else None

            r = await until(refused, timeout_s=2.5, what="the holders to take both connections")
            assert r.status_code == 503 and r.json()["error"]["code"] == "overloaded", r.text
            assert_error_shape(r)
            await asyncio.gather(*holders)
            assert (await http.get("/v1/sandboxes")).status_code == 200  # the pool is free again


async def test_a_runtime_token_counts_against_its_tenants_budget(plane):
    """A SWE-ReX runtime's token (not an API key) names the tenant: its calls share the tenant's
    in-flight budget, so a tenant cannot go around tenant_max_inflight through a compatibility
    surface (each call holds a connection to a node-agent, shared by every tenant)."""
    async with httpx.AsyncClient(base_url=plane.urls["api"], timeout=60) as http:
        sandbox = await running_sandbox(http, "tenant-a")
        issued = await http.post(f"/v1/sandboxes/{sandbox}/swerex-token", headers=bearer("tenant-a"))
        assert issued.status_code == 201, issued.text
        runtime = {"X-API-Key": issued.json()["token"]}
        assert (await http.get(f"/v1/sandboxes/{sandbox}/swerex/is_alive", headers=runtime)).status_code == 200
        plane.backend.held = sandbox
        held = [asyncio.create_task(http.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "true"},
                                              headers=bearer("tenant-a"))) for _ in range(TENANT_MAX_INFLIGHT)]
        limiter = plane.api.state.services.tenant_limiter
        await until(lambda: limiter.inflight("tenant-a") == TENANT_MAX_INFLIGHT, timeout_s=60,
                    what="tenant A's execs to hold every slot it may")
        refused = await http.get(f"/v1/sandboxes/{sandbox}/swerex/is_alive", headers=runtime)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "tenant_concurrency_limit", refused.text
        plane.backend.release.set()
        assert {r.status_code for r in await asyncio.gather(*held)} == {200}
        assert (await http.get(f"/v1/sandboxes/{sandbox}/swerex/is_alive", headers=runtime)).status_code == 200
        assert limiter.inflight("tenant-a") == 0


async def test_the_pool_to_node_agents_waits_a_bounded_time(plane):
    async with httpx.AsyncClient(base_url=plane.urls["api"], timeout=30) as http:
        sandbox = await running_sandbox(http, "tenant-a")
    client = NodeAgentClient(TOKEN, max_connections=1, pool_timeout_s=0.1)
    try:
        # One takes the only connection for EXEC_S; the other gives up after 0.1 s.
        results = await asyncio.gather(*(client.exec(plane.urls["node"], sandbox, ExecRequest(cmd="true"))
                                         for _ in range(2)), return_exceptions=True)
        timeouts = [r for r in results if isinstance(r, httpx.PoolTimeout)]
        assert len(timeouts) == 1 and isinstance(as_unavailable(timeouts[0]), Overloaded), results
        assert [r.exit_code for r in results if isinstance(r, ExecResult)] == [0], results  # the other: a 200
    finally:
        await client.aclose()


async def test_every_internal_service_wants_the_internal_token(plane):
    urls = plane.urls
    node_exec = f"{urls['node']}/v1/sandboxes/sb-none/exec"
    cases = [  # (method, url, json): a read and a write where the service has both
        ("GET", f"{urls['image-service']}/v1/environments/tiny", None),
        ("POST", f"{urls['image-service']}/v1/environments", {"name": "tiny2", "base": "tiny:1"}),
        ("GET", f"{urls['scheduler']}/v1/nodes", None),
        ("GET", f"{urls['node']}/v1/fncall/pools", None),
        ("POST", node_exec, {"cmd": "true"}),
    ]
    async with httpx.AsyncClient(timeout=30) as http:
        for method, url, body in cases:
            for headers in ({}, {INTERNAL_TOKEN_HEADER: "wrong"}):
                r = await http.request(method, url, json=body, headers=headers)
                assert r.status_code == 401, (method, url, r.status_code, r.text)
                assert r.json()["error"]["code"] == "unauthorized"
                assert r.json()["error"]["details"][0]["loc"] == ["header", INTERNAL_TOKEN_HEADER]
        answers = {(m, u): (await http.request(m, u, json=b, headers=INTERNAL)).status_code for m, u, b in cases}
        assert answers == {("GET", cases[0][1]): 200, ("POST", cases[1][1]): 201, ("GET", cases[2][1]): 200,
                           ("GET", cases[3][1]): 200, ("POST", node_exec): 404}, answers  # 404: past the token
        nodes = (await http.get(f"{urls['scheduler']}/v1/nodes", headers=INTERNAL)).json()
        assert plane.node_settings.node_id in {n["node_id"] for n in nodes}
        for name in ("image-service", "scheduler", "node", "api"):  # health stays open
            assert (await http.get(f"{urls[name]}/healthz")).status_code == 200
        assert (await http.get(f"{urls['node']}/metrics")).status_code == 200
        # And the api, which calls image-service and the node-agent, sends it: the whole path works.
        api = httpx.AsyncClient(base_url=urls["api"], timeout=30, headers=bearer("tenant-b"))
        sandbox = await running_sandbox(api, "tenant-b")
        assert (await api.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "true"})).status_code == 200
        await api.aclose()
