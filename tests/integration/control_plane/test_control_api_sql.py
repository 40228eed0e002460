"""The api's durable records (keys, sandbox history) on SQLite and PostgreSQL, via Alembic."""

import subprocess
import sys
import uuid

import pytest
from sqlalchemy import create_engine, inspect

from corral_api.auth.service import ApiKeyService, parse_bootstrap_keys
from corral_api.db.engine import make_engine, migrate
from corral_api.sandboxes.repository import HistoryRepository
from corral_common.contracts.sandboxes import SandboxSpec, SandboxState, Usage
from corral_common.store.state_records import SandboxRecord


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/api.db"
        return
    server = request.getfixturevalue("postgres_url")
    name = f"api_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    yield server.rsplit("/", 1)[0] + f"/{name}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
    admin.dispose()


def test_migrations_keys_and_history(database_url):
    migrate(database_url)
    migrate(database_url)  # idempotent
    engine = make_engine(database_url)
    assert {"api_keys", "sandbox_history", "alembic_version"} <= set(inspect(engine).get_table_names())

    keys = ApiKeyService(engine)
    for tenant, key in parse_bootstrap_keys("alpha:alpha-key-123,beta:beta-key-4567"):
        keys.add(tenant, key)
    keys.add("alpha", "alpha-key-123")  # re-seeding at every start is harmless
    assert ApiKeyService(engine).tenant_for("alpha-key-123") == "alpha"
    assert ApiKeyService(engine).tenant_for("nope-nope-nope") is None

    history = HistoryRepository(engine)
    record = SandboxRecord(id="sb-1", tenant="alpha", state=SandboxState.failed, reason="oom_killed",
                           spec=SandboxSpec(environment="busybox", labels={"job": "j1"}), created_at=1000.0,
                           updated_at=1010.0, node_id="node-1", started_at=1001.0, ended_at=1010.0,
                           usage=Usage(cpu_seconds=1.5, peak_memory_bytes=5 * 1024**3, wall_time_s=9.0))
    history.record(record)
    history.record(record)  # a re-delivered terminal event writes the same row
    back = history.get("sb-1")
    assert (back.state, back.reason, back.tenant, back.node_id) == (SandboxState.failed, "oom_killed", "alpha", "node-1")
    assert back.usage.peak_memory_bytes == 5 * 1024**3  # > 2^31: needs BIGINT on PostgreSQL
    assert back.spec.labels == {"job": "j1"} and back.ended_at == pytest.approx(1010.0)
    engine.dispose()


def test_bad_bootstrap_keys_are_refused():
    with pytest.raises(ValueError):
        parse_bootstrap_keys("tenant-without-key")
    with pytest.raises(ValueError):
        parse_bootstrap_keys("t:short")


def test_rollout_log_tables(database_url):
    """Migration 0002 and the claim / complete / lease semantics the exactly-once steps rely on."""
    import time
    from datetime import UTC, datetime

    from corral_api.rollouts.models import RolloutRow, RolloutStepRow
    from corral_api.rollouts.repository import RolloutRepository

    migrate(database_url)
    engine = make_engine(database_url)
    assert {"rollouts", "rollout_steps"} <= set(inspect(engine).get_table_names())
    repo = RolloutRepository(engine)
    now = datetime.now(UTC)
    repo.create(RolloutRow(id="ro-1", tenant="alpha", job_id="job", sandbox_id="sb-1", meta={"episode": 3},
                           idle_pause_s=10, ttl_s=100, pause_at=time.time() - 1, expires_at=time.time() + 100,
                           created_at=now, updated_at=now))

    def step(index: int, executor: str = "api-a", lease: float = 60.0) -> RolloutStepRow:
        return RolloutStepRow(rollout_id="ro-1", step_index=index, action="exec", args={"cmd": "true"},
                              request_hash="h" * 64, executor=executor, lease_until=time.time() + lease,
                              started_at=now)

    assert repo.claim(step(0), expires_at=time.time() + 100)
    assert not repo.claim(step(0, "api-b"), expires_at=None)  # one claim per index
    assert repo.get("ro-1").step_count == 1 and repo.has_pending("ro-1")
    assert not repo.complete("ro-1", 0, "api-b", status="done", observation={}, error=None, duration_ms=1.0)
    assert repo.complete("ro-1", 0, "api-a", status="done", observation={"exit_code": 0, "stdout": "ü"}, error=None,
                         duration_ms=1.5)
    assert not repo.complete("ro-1", 0, "api-a", status="failed", observation=None, error={}, duration_ms=1.0)
    assert repo.claim(step(1, lease=-1), expires_at=None)  # an executor that died at once
    assert repo.interrupt_expired(time.time()) == 1
    steps = repo.steps("ro-1")
    assert [(s.step_index, s.status) for s in steps] == [(0, "done"), (1, "interrupted")]
    assert steps[0].observation == {"exit_code": 0, "stdout": "ü"} and steps[1].error["code"] == "step_interrupted"
    assert repo.get("ro-1").step_count == 2 and not repo.has_pending("ro-1")
    row, first, pending = repo.lookup("ro-1", 0)
    assert (row.meta, row.step_count, first.observation, first.status, pending) == (
        {"episode": 3}, 2, {"exit_code": 0, "stdout": "ü"}, "done", False)
    assert first.started_at.timestamp() == pytest.approx(now.timestamp(), abs=1)
    assert repo.lookup("ro-1", 5)[1] is None and repo.lookup("ro-nope", 0) == (None, None, False)

    repo.update("ro-1", pause_at=time.time() - 1)
    assert [r.id for r in repo.due_for_pause(time.time())] == ["ro-1"]
    assert repo.update("ro-1", from_status=["active"], status="paused", pause_at=None)
    assert not repo.update("ro-1", from_status=["active"], status="finished")
    assert repo.due_for_pause(time.time()) == []
    repo.update("ro-1", expires_at=time.time() - 1)
    assert [r.id for r in repo.due_for_expiry(time.time())] == ["ro-1"]
    assert [r.meta for r in repo.list("alpha", "job", None, 10)] == [{"episode": 3}]
    assert repo.list("beta", None, None, 10) == []
    engine.dispose()


def test_snapshot_records_and_history_runtime(database_url):
    """Migration 0003: snapshot rows (tenant listing, sizes past 2^31, the source spec) and the
    runtime a terminal sandbox record keeps."""
    from datetime import UTC, datetime, timedelta

    from corral_api.snapshots.models import SnapshotRow
    from corral_api.snapshots.repository import SnapshotRepository
    from corral_api.snapshots.service import to_schema

    migrate(database_url)
    engine = make_engine(database_url)
    assert "snapshots" in inspect(engine).get_table_names()
    assert "runtime" in {c["name"] for c in inspect(engine).get_columns("sandbox_history")}
    repo = SnapshotRepository(engine)
    spec = SandboxSpec(environment="desktop", display=True, memory_mb=2048, cpu=2)
    t0 = datetime.now(UTC)
    for i, (tenant, sandbox) in enumerate([("alpha", "sb-1"), ("beta", "sb-2"), ("alpha", "sb-3")]):
        repo.add(SnapshotRow(id=f"snap-{i}", tenant=tenant, sandbox_id=sandbox, node_id="node-1", backend="vm",
                             environment="desktop", memory_mb=2048, cpu=2, size_bytes=3 * 1024**3,
                             spec=spec.model_dump(mode="json"), created_at=t0 + timedelta(seconds=i)))
    assert [r.id for r in repo.list("alpha")] == ["snap-0", "snap-2"]  # oldest first, this tenant only
    assert [r.id for r in repo.list("alpha", sandbox_id="sb-3")] == ["snap-2"]
    row = repo.get("snap-1")
    assert row.tenant == "beta" and SandboxSpec.model_validate(row.spec).display is True
    schema = to_schema(row)
    assert schema.size_bytes == 3 * 1024**3 and schema.created_at.tzinfo is not None
    assert repo.delete("snap-1") and not repo.delete("snap-1") and repo.get("snap-1") is None

    history = HistoryRepository(engine)
    history.record(SandboxRecord(id="sb-vm", tenant="alpha", state=SandboxState.terminated, spec=spec,
                                 created_at=1000.0, updated_at=1010.0, ended_at=1010.0,
                                 runtime={"backend": "vm", "accelerator": "tcg"}))
    assert history.get("sb-vm").runtime == {"backend": "vm", "accelerator": "tcg"}
    engine.dispose()


# Each child imports first, says "ready", then migrates when told: they all start the upgrade together.
_MIGRATE = """
import sys
from {module} import {function}
from sqlalchemy import create_engine
print("ready", flush=True)
sys.stdin.readline()
{call}
"""


def test_replicas_starting_together_migrate_one_database_once(request):
    """Two api replicas (and two image-service replicas sharing the database) starting at the
    same moment all run their migrations on one empty PostgreSQL database: each must wait for
    the other, not fail on a table the other just created."""
    server = request.getfixturevalue("postgres_url")
    name = f"api_race_{uuid.uuid4().hex[:10]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = server.rsplit("/", 1)[0] + f"/{name}"
    api = _MIGRATE.format(module="corral_api.db.engine", function="migrate", call=f"migrate({url!r})")
    images = _MIGRATE.format(module="corral_image_service.db", function="run_migrations",
                             call=f"engine = create_engine({url!r}); run_migrations(engine); engine.dispose()")
    children = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for code in (api, api, images, images)]
    try:
        for child in children:
            assert child.stdout.readline().strip() == "ready", child.stderr.read()
        for child in children:
            child.stdin.write("\n")
            child.stdin.flush()
        for child in children:
            _, err = child.communicate(timeout=120)
            assert child.returncode == 0, err[-3000:]
        engine = create_engine(url)
        tables = set(inspect(engine).get_table_names())
        assert {"api_keys", "sandbox_history", "alembic_version", "alembic_version_image_service"} <= tables
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM alembic_version").scalar() == 1
        engine.dispose()
    finally:
        for child in children:
            child.kill()
            child.wait()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.dispose()


def test_admin_keys_tenants_and_usage_totals(database_url):
    """Migration 0006 on both databases: keys with ids, roles and revocation; tenants with
    quotas; billing totals summed in SQL from the history rows."""
    from corral_api.admin.repository import UsageRepository
    from corral_api.tenants.repository import TenantRepository

    migrate(database_url)
    engine = make_engine(database_url)
    keys = ApiKeyService(engine)
    keys.add("ops", "operator-key-123", role="operator", name="root")
    assert keys.lookup("operator-key-123").is_operator
    row, key = keys.create("ops", name="second")
    new, new_key, old = keys.rotate(row.id)
    assert keys.lookup(key) is None and keys.lookup(new_key).key_id == new.id and old.revoked_at is not None
    assert keys.revoke(new.id).revoked_at is not None and keys.lookup(new_key) is None
    tenants = TenantRepository(engine)
    assert tenants.create("ops", {}) is None  # the bootstrap made it
    assert tenants.update("ops", {"max_cpu": 4, "max_sandboxes": None}).quotas == {"max_cpu": 4}
    history = HistoryRepository(engine)
    for i, (memory_mb, wall_s, cpu_s) in enumerate([(64, 10.0, 2.0), (256, 3600.0, 100.0)]):
        history.record(SandboxRecord(
            id=f"sb-bill{i}", tenant="ops", state=SandboxState.terminated,
            spec=SandboxSpec(environment="busybox", memory_mb=memory_mb), created_at=1.0, updated_at=2.0,
            started_at=1.0, ended_at=1.0 + wall_s, usage=Usage(cpu_seconds=cpu_s, wall_time_s=wall_s)))
    totals = UsageRepository(engine).totals("ops")
    assert totals == {"cpu_s": 102.0, "memory_mb_s": 64 * 10.0 + 256 * 3600.0, "sandbox_hours": 3610.0 / 3600,
                      "sandboxes_ended": 2}
    assert UsageRepository(engine).totals("nobody")["sandboxes_ended"] == 0
    engine.dispose()
