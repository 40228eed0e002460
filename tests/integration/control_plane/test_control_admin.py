"""Administration on the real control plane in this process (tests/integration/control_plane/
test_control_overload.py's: api, scheduler, image-service and a node-agent over the FakeBackend,
real Redis, RabbitMQ and SQL), and a second api replica on the same Redis and database:

- an operator creates a tenant and a key, and the key works; tenant keys get 403 on /v1/admin/*;
- a rotated or revoked key is refused at once, also by the replica that had it cached;
- bad bodies are 4xx JSON with a loc and change nothing; an unknown tenant or key is a 404;
- the N+1th sandbox over max_sandboxes is a 429 naming the quota and creates nothing; concurrent
  creates never pass the quota; a job needs room for all its sandboxes; an ended sandbox gives
  its share back; fncall calls/s are a token bucket;
- usage totals come from SQL and read the same on a fresh replica.
"""

import asyncio
import uuid
from contextlib import AsyncExitStack

import httpx
import pytest

from corral.errors import CorralError
from corral_api.app import create_app as api_app
from corral_api.quotas.ledger import Demand, QuotaLedger
from corral_common.store.state import StateStore
from corral_common.web.errors import TooManyRequests
from tests.inprocess import serve
from tests.integration.control_plane.test_control_overload import start_plane
from tests.polling import until

OPERATOR_KEY = "operator-key-for-the-admin-test"
TENANT_A_KEY = "key-a-0123456789"  # start_plane's tenant-a
SPEC = {"environment": "tiny", "cpu": 0.1, "memory_mb": 64, "disk_mb": 64}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


OPS = bearer(OPERATOR_KEY)


@pytest.fixture
async def plane(redis_url, amqp_url, tmp_path, monkeypatch):
    async with AsyncExitStack() as stack:
        plane = await start_plane(stack, tmp_path, redis_url, amqp_url, monkeypatch,
                                  operator_keys=f"ops:{OPERATOR_KEY}")
        # A second api replica on the same Redis, RabbitMQ and database.
        plane.urls["api2"] = await stack.enter_async_context(serve(api_app(plane.api.state.settings)))
        plane.http = await stack.enter_async_context(httpx.AsyncClient(base_url=plane.urls["api"], timeout=60))
        plane.http2 = await stack.enter_async_context(httpx.AsyncClient(base_url=plane.urls["api2"], timeout=60))
        yield plane


async def new_tenant(http: httpx.AsyncClient, **quotas) -> tuple[str, str, str]:
    """A fresh tenant (unique: the Redis ledger outlives a test run) and a key of it: (name, key, key id)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    r = await http.post("/v1/admin/tenants", headers=OPS, json={"name": name, "quotas": quotas})
    assert r.status_code == 201, r.text
    assert r.json()["quotas"] == {k: quotas.get(k) for k in r.json()["quotas"]}
    r = await http.post("/v1/admin/keys", headers=OPS, json={"tenant": name, "name": "ci"})
    assert r.status_code == 201, r.text
    return name, r.json()["key"], r.json()["id"]


def assert_error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert error["code"] == code, error
    return error


async def test_an_operator_makes_a_tenant_and_a_key_and_the_key_works(plane):
    name, key, key_id = await new_tenant(plane.http, max_sandboxes=5)
    r = await plane.http.get("/v1/sandboxes", headers=bearer(key))
    assert r.status_code == 200 and r.json()["items"] == [], r.text
    keys = (await plane.http.get("/v1/admin/keys", params={"tenant": name}, headers=OPS)).json()["keys"]
    assert [k["id"] for k in keys] == [key_id] and keys[0]["role"] == "tenant" and keys[0]["revoked_at"] is None
    assert "key" not in keys[0] and "key_hash" not in keys[0] and key.startswith(keys[0]["prefix"])
    listed = (await plane.http.get("/v1/admin/tenants", headers=OPS)).json()["tenants"]
    assert {"tenant-a", "tenant-b", "operator", name} <= {t["name"] for t in listed}
    detail = (await plane.http.get(f"/v1/admin/tenants/{name}", headers=OPS)).json()
    assert detail["quotas"]["max_sandboxes"] == 5 and detail["usage"]["current"]["sandboxes"] == 0
    assert (await plane.http.post("/v1/admin/tenants", headers=OPS, json={"name": name})).status_code == 409
    # The bootstrap operator key is a key like the others (listed, never shown).
    ops = (await plane.http.get("/v1/admin/keys", params={"tenant": "operator"}, headers=OPS)).json()["keys"]
    assert [(k["name"], k["role"]) for k in ops] == [("ops", "operator")]


async def test_tenant_keys_get_403_and_no_key_401_on_every_admin_route(plane):
    routes = [("GET", "/v1/admin/tenants", None), ("POST", "/v1/admin/tenants", {"name": "x-sneaky"}),
              ("GET", "/v1/admin/tenants/tenant-b", None),
              ("PATCH", "/v1/admin/tenants/tenant-b", {"quotas": {"max_sandboxes": 0}}),
              ("GET", "/v1/admin/keys", None), ("POST", "/v1/admin/keys", {"tenant": "tenant-b"}),
              ("POST", "/v1/admin/keys/key-0/rotate", None), ("DELETE", "/v1/admin/keys/key-0", None)]
    for method, path, body in routes:
        r = await plane.http.request(method, path, json=body, headers=bearer(TENANT_A_KEY))
        assert_error(r, 403, "operator_only")
        assert_error(await plane.http.request(method, path, json=body), 401, "unauthorized")
    assert (await plane.http.get("/v1/admin/tenants", headers=OPS)).status_code == 200
    tenants = (await plane.http.get("/v1/admin/tenants", headers=OPS)).json()["tenants"]
    assert "x-sneaky" not in {t["name"] for t in tenants}
    assert next(t for t in tenants if t["name"] == "tenant-b")["quotas"]["max_sandboxes"] is None


async def test_rotation_and_revocation_hold_at_once_on_every_replica(plane):
    name, key, key_id = await new_tenant(plane.http)
    for http in (plane.http, plane.http2):  # both replicas have the key cached now
        assert (await http.get("/v1/sandboxes", headers=bearer(key))).status_code == 200
    r = await plane.http.post(f"/v1/admin/keys/{key_id}/rotate", headers=OPS)
    assert r.status_code == 200, r.text
    rotated = r.json()
    assert rotated["replaces"] == key_id and rotated["id"] != key_id and rotated["tenant"] == name
    for http in (plane.http2, plane.http):
        assert_error(await http.get("/v1/sandboxes", headers=bearer(key)), 401, "unauthorized")
        assert (await http.get("/v1/sandboxes", headers=bearer(rotated["key"]))).status_code == 200
    assert_error(await plane.http.post(f"/v1/admin/keys/{key_id}/rotate", headers=OPS), 409, "key_revoked")

    r = await plane.http2.delete(f"/v1/admin/keys/{rotated['id']}", headers=OPS)
    assert r.status_code == 200 and r.json()["revoked_at"] is not None, r.text
    for http in (plane.http, plane.http2):
        assert_error(await http.get("/v1/sandboxes", headers=bearer(rotated["key"])), 401, "unauthorized")
    # Disabling the tenant refuses its new keys too, at once; enabling it again lets them in.
    r = await plane.http.post("/v1/admin/keys", headers=OPS, json={"tenant": name})
    third = r.json()["key"]
    assert (await plane.http2.get("/v1/sandboxes", headers=bearer(third))).status_code == 200
    assert (await plane.http.patch(f"/v1/admin/tenants/{name}", headers=OPS, json={"disabled": True})).status_code == 200
    assert_error(await plane.http2.get("/v1/sandboxes", headers=bearer(third)), 401, "unauthorized")
    assert (await plane.http.patch(f"/v1/admin/tenants/{name}", headers=OPS, json={"disabled": False})).status_code == 200
    assert (await plane.http2.get("/v1/sandboxes", headers=bearer(third))).status_code == 200


async def test_bad_input_is_a_4xx_with_a_loc_and_changes_nothing(plane):
    name, _, key_id = await new_tenant(plane.http, max_sandboxes=2)
    cases = [("POST", "/v1/admin/tenants", {"name": "Not A Name"}, 422, "body"),
             ("POST", "/v1/admin/tenants", {"name": "ok-name", "quotas": {"max_gpus": 1}}, 422, "body"),
             ("PATCH", f"/v1/admin/tenants/{name}", {"quotas": {"max_sandboxes": -1}}, 422, "body"),
             ("PATCH", f"/v1/admin/tenants/{name}", {"quotas": {"max_sandboxes": 9}, "color": "red"}, 422, "body"),
             ("POST", "/v1/admin/keys", {"tenant": name, "role": "root"}, 422, "body"),
             ("POST", "/v1/admin/keys", {"tenant": "no-such-tenant"}, 404, "body"),
             ("GET", "/v1/admin/tenants/no-such-tenant", None, 404, "path"),
             ("PATCH", "/v1/admin/tenants/no-such-tenant", {"quotas": {}}, 404, "path"),
             ("GET", "/v1/admin/keys?tenant=no-such-tenant", None, 404, "query"),
             ("POST", "/v1/admin/keys/key-nope/rotate", None, 404, "path"),
             ("DELETE", "/v1/admin/keys/key-nope", None, 404, "path")]
    for method, path, body, status, where in cases:
        r = await plane.http.request(method, path, json=body, headers=OPS)
        assert r.status_code == status, (method, path, r.text)
        details = r.json()["error"]["details"]
        assert details and details[0]["loc"][0] == where, (path, r.text)
    detail = (await plane.http.get(f"/v1/admin/tenants/{name}", headers=OPS)).json()
    assert detail["quotas"]["max_sandboxes"] == 2
    assert "ok-name" not in {t["name"] for t in (await plane.http.get("/v1/admin/tenants", headers=OPS)).json()["tenants"]}
    keys = (await plane.http.get("/v1/admin/keys", params={"tenant": name}, headers=OPS)).json()["keys"]
    assert [k["id"] for k in keys] == [key_id]


async def test_the_sandbox_past_max_sandboxes_is_a_429_and_nothing_is_created(plane):
    name, key, _ = await new_tenant(plane.http, max_sandboxes=2)
    made = []
    for _ in range(2):
        r = await plane.http.post("/v1/sandboxes", headers=bearer(key), json=SPEC)
        assert r.status_code == 202, r.text
        made.append(r.json()["id"])
    r = await plane.http2.post("/v1/sandboxes", headers=bearer(key), json=SPEC)
    error = assert_error(r, 429, "quota_exceeded")
    assert (error["quota"], error["limit"], error["used"]) == ("max_sandboxes", 2, 2) and error["loc"] == ["body"]
    listed = (await plane.http.get("/v1/sandboxes", headers=bearer(key))).json()["items"]
    assert sorted(s["id"] for s in listed) == sorted(made)
    # One ends: its share comes back (the terminal-event consumer), and one more fits.
    assert (await plane.http.delete(f"/v1/sandboxes/{made[0]}", headers=bearer(key))).status_code in (200, 202)

    async def room() -> bool:
        return (await plane.http.get(f"/v1/admin/tenants/{name}", headers=OPS)).json()["usage"]["current"][
            "sandboxes"] == 1
    await until(room, timeout_s=30, what="the ended sandbox's share to come back")
    assert (await plane.http.post("/v1/sandboxes", headers=bearer(key), json=SPEC)).status_code == 202
    # cpu: a quota of 0.25 cores holds two sandboxes of 0.1, not a third.
    name2, key2, _ = await new_tenant(plane.http, max_cpu=0.25)
    for _ in range(2):
        assert (await plane.http.post("/v1/sandboxes", headers=bearer(key2), json=SPEC)).status_code == 202
    error = assert_error(await plane.http.post("/v1/sandboxes", headers=bearer(key2), json=SPEC), 429,
                         "quota_exceeded")
    assert (error["quota"], error["limit"], error["used"]) == ("max_cpu", 0.25, 0.2)
    # Raising the quota applies at once, on the other replica too.
    r = await plane.http.patch(f"/v1/admin/tenants/{name2}", headers=OPS, json={"quotas": {"max_cpu": None}})
    assert r.status_code == 200 and r.json()["quotas"]["max_cpu"] is None
    assert (await plane.http2.post("/v1/sandboxes", headers=bearer(key2), json=SPEC)).status_code == 202


async def test_concurrent_creates_on_two_replicas_never_pass_the_quota(plane):
    _, key, _ = await new_tenant(plane.http, max_sandboxes=5, max_memory_mb=10_000)

    async def create(i: int) -> int:
        http = plane.http if i % 2 else plane.http2
        return (await http.post("/v1/sandboxes", headers=bearer(key), json=SPEC)).status_code

    codes = await asyncio.gather(*(create(i) for i in range(24)))
    assert sorted(codes) == [202] * 5 + [429] * 19, codes
    assert len((await plane.http.get("/v1/sandboxes", headers=bearer(key))).json()["items"]) == 5


async def test_a_job_needs_room_for_all_its_sandboxes(plane):
    name, key, _ = await new_tenant(plane.http, max_sandboxes=3)
    r = await plane.http.post("/v1/jobs", headers=bearer(key), json={"spec": SPEC, "count": 4})
    error = assert_error(r, 429, "quota_exceeded")
    assert (error["quota"], error["limit"], error["used"], error["loc"]) == ("max_sandboxes", 3, 0, ["body", "count"])
    assert (await plane.http.get("/v1/sandboxes", headers=bearer(key))).json()["items"] == []
    r = await plane.http.post("/v1/jobs", headers=bearer(key), json={"spec": SPEC, "count": 3})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert_error(await plane.http.post("/v1/sandboxes", headers=bearer(key), json=SPEC), 429, "quota_exceeded")
    # Deleting the job gives back all three (those that ran and any never made).
    assert (await plane.http.delete(f"/v1/jobs/{job_id}", headers=bearer(key))).status_code in (200, 202)

    async def freed() -> bool:
        usage = (await plane.http.get("/v1/usage", headers=bearer(key))).json()
        return usage["current"]["sandboxes"] == 0
    await until(freed, timeout_s=60, what="the deleted job's share to come back")
    assert (await plane.http.post("/v1/sandboxes", headers=bearer(key), json=SPEC)).status_code == 202


async def test_usage_totals_come_from_sql_and_read_the_same_on_a_fresh_replica(plane):
    name, key, _ = await new_tenant(plane.http)
    r = await plane.http.post("/v1/sandboxes", params={"wait_for": "running", "timeout": 30}, headers=bearer(key),
                              json=SPEC)
    assert r.status_code == 202 and r.json()["state"] == "running", r.text
    sandbox_id = r.json()["id"]
    usage = (await plane.http.get("/v1/usage", headers=bearer(key))).json()
    assert usage["tenant"] == name and usage["current"] == {"sandboxes": 1, "cpu": 0.1, "memory_mb": 64,
                                                           "disk_mb": 64, "image_bytes": 0}
    assert usage["totals"]["sandboxes_ended"] == 0
    await plane.http.delete(f"/v1/sandboxes/{sandbox_id}", headers=bearer(key))

    async def billed() -> dict | None:
        totals = (await plane.http.get("/v1/usage", headers=bearer(key))).json()["totals"]
        return totals if totals["sandboxes_ended"] == 1 else None
    totals = await until(billed, timeout_s=30, what="the ended sandbox in the usage totals")
    assert totals["sandbox_hours"] > 0 and totals["memory_mb_s"] == pytest.approx(64 * totals["sandbox_hours"] * 3600)
    assert totals["cpu_s"] >= 0
    async with AsyncExitStack() as stack:  # a replica started now reads the same totals from SQL
        fresh = await stack.enter_async_context(serve(api_app(plane.api.state.settings)))
        async with httpx.AsyncClient(base_url=fresh) as http:
            again = (await http.get(f"/v1/admin/tenants/{name}", headers=OPS)).json()["usage"]["totals"]
    assert again == totals


async def test_fncall_calls_per_second_are_a_token_bucket(plane):
    _, key, _ = await new_tenant(plane.http, max_fncall_per_s=1)
    call = {"runtime": "python", "code": "print(1)"}
    first = await plane.http.post("/v1/fncall/batch", headers=bearer(key), json={"calls": [call]})
    assert first.status_code != 429, first.text
    r = await plane.http2.post("/v1/fncall/batch", headers=bearer(key), json={"calls": [call]})
    error = assert_error(r, 429, "quota_exceeded")
    assert error["quota"] == "max_fncall_per_s" and int(r.headers["Retry-After"]) >= 1


async def test_the_ledger_gives_a_jobs_sandbox_back_once_however_often_its_event_comes(redis_url):
    store = StateStore.from_url(redis_url)
    ledger = QuotaLedger(store.redis)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    try:
        await ledger.admit(tenant, "job-1", Demand(3, 0.5, 100, 10), {"max_memory_mb": 300}, ["body"])
        assert await ledger.used(tenant) == {"sandboxes": 3, "cpu": 1.5, "memory_mb": 300, "disk_mb": 30}
        with pytest.raises(TooManyRequests) as info:
            await ledger.admit(tenant, "sb-x", Demand(1, 0.5, 1, 1), {"max_memory_mb": 300}, ["body"])
        assert info.value.extra["quota"] == "max_memory_mb"
        assert [await ledger.release(tenant, "job-1", "job-1-00000") for _ in range(3)] == [1, 0, 0]
        assert (await ledger.used(tenant))["sandboxes"] == 2
        assert await ledger.release(tenant, "job-1") == 2  # the rest (a deleted job)
        assert await ledger.used(tenant) == {"sandboxes": 0, "cpu": 0.0, "memory_mb": 0, "disk_mb": 0}
        assert await ledger.entries(tenant) == {}
    finally:
        await store.redis.delete(f"quota:used:{tenant}", f"quota:entries:{tenant}", f"quota:released:{tenant}:job-1")
        await store.close()


async def test_a_job_queued_again_after_redis_lost_it_counts_once_per_sandbox(redis_url):
    store = StateStore.from_url(redis_url)
    ledger = QuotaLedger(store.redis)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    size = Demand(1, 0.5, 100, 10)
    try:
        # Two of job-2's sandboxes a node registered again (each under its own id), another job's.
        for entry in ("job-2-00003", "job-2-00007", "job-22-00001"):
            await ledger.admit(tenant, entry, size, {}, ["body"])
        # Queued again: 5 of its sandboxes had not ended; its 2 registered ones among them.
        assert await ledger.readmit_job(tenant, "job-2", Demand(5, 0.5, 100, 10))
        assert await ledger.used(tenant) == {"sandboxes": 6, "cpu": 3.0, "memory_mb": 600, "disk_mb": 60}
        assert {k: n for k, (n, _) in (await ledger.entries(tenant)).items()} == {"job-2": 5, "job-22-00001": 1}
        assert not await ledger.readmit_job(tenant, "job-2", Demand(5, 0.5, 100, 10))  # counted once
        assert (await ledger.used(tenant))["sandboxes"] == 6
        # A registered one ending gives back to the job's entry, once.
        assert [await ledger.release(tenant, "job-2", "job-2-00003") for _ in range(2)] == [1, 0]
        assert await ledger.release(tenant, "job-2-00003") == 0  # its own entry is gone
        assert await ledger.release(tenant, "job-2") == 4
        assert await ledger.used(tenant) == {"sandboxes": 1, "cpu": 0.5, "memory_mb": 100, "disk_mb": 10}
        # Nothing left to run: only its registered ones' own entries are folded away.
        await ledger.admit(tenant, "job-3-00000", size, {}, ["body"])
        assert await ledger.readmit_job(tenant, "job-3", Demand(0, 0.5, 100, 10))
        assert set(await ledger.entries(tenant)) == {"job-22-00001"}
    finally:
        await store.redis.delete(f"quota:used:{tenant}", f"quota:entries:{tenant}", f"quota:released:{tenant}:job-2")
        await store.close()


def admin_cli(url: str, api_key: str):
    """``corral admin`` as corral.cli.main mounts it (the root sets the shared State: url, key, --json)."""
    context = pytest.importorskip("corral.cli.context", reason="corral.cli.context comes with the CLI (issue 15 part 1)")
    import typer

    from corral.cli import admin

    root = typer.Typer()

    @root.callback()
    def _root(ctx: typer.Context, json_output: bool = typer.Option(False, "--json")) -> None:
        ctx.obj = context.State(url=url, api_key=api_key, json=json_output)

    root.add_typer(admin.app, name="admin")
    return root


async def test_the_admin_cli_rotates_a_key_and_the_old_one_is_refused_at_once(plane, tmp_path):
    import json

    from typer.testing import CliRunner

    ops = admin_cli(plane.urls["api"], OPERATOR_KEY)
    env = {"CORRAL_CONFIG": str(tmp_path / "none.toml")}

    async def run(*args: str, app=ops):
        result = await asyncio.to_thread(CliRunner().invoke, app, list(args), env=env)
        return result

    name = f"t-{uuid.uuid4().hex[:8]}"
    r = await run("--json", "admin", "tenants", "create", name, "--max-sandboxes", "3", "--max-cpu", "none")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["quotas"]["max_sandboxes"] == 3
    r = await run("--json", "admin", "keys", "create", name, "--name", "trainer")
    assert r.exit_code == 0, r.output
    created = json.loads(r.stdout)
    r = await run("--json", "admin", "keys", "rotate", created["id"])
    assert r.exit_code == 0, r.output
    rotated = json.loads(r.stdout)
    assert rotated["replaces"] == created["id"]
    assert_error(await plane.http2.get("/v1/sandboxes", headers=bearer(created["key"])), 401, "unauthorized")
    assert (await plane.http2.get("/v1/sandboxes", headers=bearer(rotated["key"]))).status_code == 200
    r = await run("--json", "admin", "keys", "ls", "--tenant", name)
    assert [(k["id"], bool(k["revoked_at"])) for k in json.loads(r.stdout)["keys"]] == [
        (created["id"], True), (rotated["id"], False)]
    r = await run("admin", "tenants", "quota", name, "--max-sandboxes", "none")
    assert r.exit_code == 0 and "unlimited" in r.stdout, r.output
    r = await run("admin", "tenants", "quota", name, "--max-cpu", "lots")
    assert r.exit_code == 2 and "not a number" in r.output
    # A tenant key is refused: the api's 403 (corral.cli.main reports it and exits 1).
    r = await run("admin", "tenants", "ls", app=admin_cli(plane.urls["api"], rotated["key"]))
    assert isinstance(r.exception, CorralError) and (r.exception.status, r.exception.code) == (403, "operator_only")


async def test_the_fncall_bucket_admits_a_batch_bigger_than_its_burst_once_then_waits(redis_url):
    store = StateStore.from_url(redis_url)
    ledger = QuotaLedger(store.redis)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    slow = 0.001  # one call per 1000 s: nothing refills while the test runs
    try:
        await ledger.take_fncall(tenant, 1, None, ["body"])  # unlimited: no bucket at all
        assert not await store.redis.exists(f"quota:fncall:{tenant}")
        await ledger.take_fncall(tenant, 5, slow, ["body", "calls"])  # burst 1, a batch of 5: admitted, owes 4
        with pytest.raises(TooManyRequests) as info:
            await ledger.take_fncall(tenant, 1, slow, ["body"])
        assert info.value.extra["quota"] == "max_fncall_per_s" and info.value.retry_after_s >= 4000
        other = f"{tenant}-b"  # another tenant's bucket is its own
        await ledger.take_fncall(other, 1, slow, ["body"])
    finally:
        await store.redis.delete(f"quota:fncall:{tenant}", f"quota:fncall:{tenant}-b")
        await store.close()


async def test_a_tenants_own_image_quota_refuses_a_layer_past_it_and_stores_nothing(plane, tmp_path):
    from tests.integration.image_service.helpers import make_tree, tar_of

    name, key, _ = await new_tenant(plane.http, max_image_bytes=1000)
    tree = make_tree(tmp_path / "big", {"data.bin": "x" * 200_000, "etc/os-release": "ID=quota\n"})
    r = await plane.http.post("/v1/layers", params={"kind": "base", "name": "big", "version": "1"},
                              content=tar_of(tree), headers={**bearer(key), "Content-Type": "application/x-tar"})
    error = assert_error(r, 413, "storage_quota_exceeded")
    assert (error["quota"], error["quota_bytes"]) == ("max_image_bytes", 1000)
    assert "big" not in {layer["name"] for layer in (await plane.http.get("/v1/layers", headers=bearer(key))).json()}
    usage = (await plane.http.get("/v1/usage", headers=bearer(key))).json()["current"]
    assert usage["image_bytes"] == 0
    assert (await plane.http.get("/v1/images/usage", headers=bearer(key))).json()["quota_bytes"] == 1000
    # Unlimited for this tenant: the same upload is stored and counted.
    await plane.http.patch(f"/v1/admin/tenants/{name}", headers=OPS, json={"quotas": {"max_image_bytes": None}})
    r = await plane.http.post("/v1/layers", params={"kind": "base", "name": "big", "version": "1"},
                              content=tar_of(tree), headers={**bearer(key), "Content-Type": "application/x-tar"})
    assert r.status_code == 201, r.text
    assert (await plane.http.get("/v1/usage", headers=bearer(key))).json()["current"]["image_bytes"] > 1000


async def test_a_refused_create_first_reclaims_shares_whose_sandbox_is_gone(redis_url, tmp_path):
    """A share whose sandbox ended without its event reaching the api (or whose record expired)
    is given back when it would refuse a create; a share admitted just now never is."""
    import time

    from corral_api.auth.service import AuthVersion
    from corral_api.db.engine import make_engine, migrate
    from corral_api.quotas.service import TenantQuotas
    from corral_api.tenants.repository import TenantRepository
    from corral_common.contracts.sandboxes import SandboxSpec

    url = f"sqlite:///{tmp_path}/api.db"
    migrate(url)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    TenantRepository(make_engine(url)).create(tenant, {"max_sandboxes": 1})
    store = StateStore.from_url(redis_url)
    quotas = TenantQuotas(TenantRepository(make_engine(url)), QuotaLedger(store.redis), AuthVersion(store.redis))
    spec = SandboxSpec(environment="tiny", cpu=0.1, memory_mb=64, disk_mb=64)
    try:
        await quotas.admit_sandbox(tenant, "sb-young", spec)  # no record yet: being created right now
        with pytest.raises(TooManyRequests):
            await quotas.admit_sandbox(tenant, "sb-next", spec)
        # Make it old: a record that never came (or expired) two minutes on.
        entries = f"quota:entries:{tenant}"
        value = await store.redis.hget(entries, "sb-young")
        n, cpu, mem, disk, _ = (value.decode() if isinstance(value, bytes) else value).split("|")
        await store.redis.hset(entries, "sb-young", f"{n}|{cpu}|{mem}|{disk}|{time.time() - 120}")
        await quotas.admit_sandbox(tenant, "sb-next", spec)
        assert set(await quotas.ledger.entries(tenant)) == {"sb-next"}
        assert (await quotas.ledger.used(tenant))["sandboxes"] == 1
    finally:
        await store.redis.delete(f"quota:used:{tenant}", f"quota:entries:{tenant}")
        await store.close()
