"""The public api: auth, validation, sandbox records, and the data-path proxy to node-agents."""

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException

from corral_api.admin.quotas import QuotaLedger
from corral_api.admin.repository import TenantRepository, UsageRepository
from corral_api.admin.router import router as admin_router
from corral_api.admin.router import usage_router
from corral_api.admin.service import AdminService, TenantQuotas
from corral_api.auth.models import OPERATOR_ROLE
from corral_api.auth.service import ApiKeyService, parse_bootstrap_keys
from corral_api.body_limits import BodyLimitMiddleware
from corral_api.commits.router import router as commits_router
from corral_api.commits.service import CommitService
from corral_api.compat.e2b.envd_router import router as e2b_envd_router
from corral_api.compat.e2b.errors import refused_response, unknown_route_response
from corral_api.compat.e2b.ingress import E2bPortRouting
from corral_api.compat.e2b.interpreter import Interpreter
from corral_api.compat.e2b.interpreter_router import router as e2b_interpreter_router
from corral_api.compat.e2b.processes import ProcessTable
from corral_api.compat.e2b.repository import E2bRepository
from corral_api.compat.e2b.router import router as e2b_router
from corral_api.compat.e2b.service import E2bSandboxes
from corral_api.compat.sandboxfusion.router import router as sandboxfusion_router
from corral_api.compat.sandboxfusion.server import SandboxFusionServer
from corral_api.compat.swerex.router import router as swerex_router
from corral_api.compat.swerex.router import tokens as swerex_tokens_router
from corral_api.compat.swerex.service import SwerexService
from corral_api.db.engine import make_engine, migrate
from corral_api.fncall.router import router as fncall_router
from corral_api.images.client import ImageServiceWrites
from corral_api.images.router import router as images_router
from corral_api.images.service import ImageCatalogService
from corral_api.jobs.repository import JobRepository
from corral_api.jobs.router import router as jobs_router
from corral_api.jobs.service import JobService
from corral_api.limits import TenantConcurrencyMiddleware, TenantLimiter
from corral_api.metrics import PlatformGauges
from corral_api.nodes.router import router as nodes_router
from corral_api.records import RECORDS_QUEUE, TERMINAL_KEYS, TerminalRecorder
from corral_api.rollouts.repository import RolloutRepository
from corral_api.rollouts.router import router as rollouts_router
from corral_api.rollouts.service import RolloutService
from corral_api.sandboxes.capacity import NodeCeilings
from corral_api.sandboxes.data_path import SandboxDataPath
from corral_api.sandboxes.network import NetworkRules
from corral_api.sandboxes.repository import HistoryRepository
from corral_api.sandboxes.router import router as sandboxes_router
from corral_api.sandboxes.service import EnvironmentCatalog, SandboxService
from corral_api.sandboxes.waiters import StateWaiters
from corral_api.settings import ApiSettings
from corral_api.snapshots.repository import SnapshotRepository
from corral_api.snapshots.router import router as snapshots_router
from corral_api.snapshots.service import SnapshotService
from corral_api.ui.router import install_dashboard
from corral_api.ui.service import DashboardService
from corral_api.ui.sessions import UiSessions
from corral_common.amqp import EventBus
from corral_common.contracts.images import ImageServiceClient
from corral_common.contracts.node_client import NodeAgentClient
from corral_common.errors import install_error_handlers
from corral_common.events import SandboxStateChanged, state_routing_keys
from corral_common.jobs import JobStore
from corral_common.logging import configure_logging
from corral_common.metrics import METRICS_TOKEN, install_metrics, on_state
from corral_common.sandboxes import SandboxState
from corral_common.state import StateStore
from corral_common.telemetry import instrument_app, setup_tracing


def create_app(settings: ApiSettings | None = None) -> FastAPI:
    settings = settings or ApiSettings()
    configure_logging("api", settings.log_level, settings.log_json)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        setup_tracing("corral-api", settings.otel_exporter_otlp_endpoint)
        database_url = settings.effective_database_url
        if database_url.startswith("sqlite:///"):
            Path(database_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        migrate(database_url)
        engine = make_engine(database_url, **settings.sql_pool())
        store = StateStore.from_url(settings.redis_url, **settings.redis_pool())
        api_keys = ApiKeyService(engine, store.redis)
        for tenant, key in parse_bootstrap_keys(settings.keys):
            api_keys.add(tenant, key)
        for name, key in parse_bootstrap_keys(settings.operator_keys, "CORRAL_API_OPERATOR_KEYS"):
            api_keys.add(settings.operator_tenant, key, role=OPERATOR_ROLE, name=name)
        tenant_rows = TenantRepository(engine)
        quotas = TenantQuotas(tenant_rows, QuotaLedger(store.redis), api_keys.version)
        bus = await EventBus(settings.amqp_url, publish_timeout_s=settings.amqp_publish_timeout_s).connect()
        history = HistoryRepository(engine)
        waiters = StateWaiters()
        images = ImageServiceClient(settings.image_service_url, internal_token=settings.internal_token,
                                    timeout=httpx.Timeout(10.0, pool=settings.http_pool_timeout_s),
                                    limits=httpx.Limits(max_connections=settings.image_service_max_connections))
        node_client = NodeAgentClient(settings.internal_token, max_connections=settings.node_max_connections,
                                      pool_timeout_s=settings.http_pool_timeout_s)
        await bus.subscribe(state_routing_keys(SandboxState), SandboxStateChanged, waiters.on_event)
        await bus.consume(RECORDS_QUEUE, TERMINAL_KEYS, SandboxStateChanged, TerminalRecorder(store, history, quotas).handle)
        app.state.settings = settings
        app.state.api_keys = api_keys
        app.state.tenant_limiter = TenantLimiter(settings.tenant_max_inflight)
        app.state.node_client = node_client
        snapshot_rows = SnapshotRepository(engine)
        app.state.sandboxes = SandboxService(store, bus, history, waiters, EnvironmentCatalog(images),
                                             settings.max_wait_s, snapshots=snapshot_rows,
                                             ceilings=NodeCeilings(store, settings.heartbeat_timeout_s,
                                                                   max_disk_mb=settings.max_disk_mb),
                                             network=NetworkRules(settings, store, api_host=settings.host),
                                             quotas=quotas)
        image_writes = ImageServiceWrites(settings.image_service_url, settings.internal_token,
                                          max_connections=settings.image_service_max_connections,
                                          pool_timeout_s=settings.http_pool_timeout_s)
        app.state.images = ImageCatalogService(image_writes, quota_bytes=settings.image_quota_bytes,
                                               forget_environment=app.state.sandboxes.environments.forget,
                                               tenant_quota=quotas.image_quota_bytes)
        app.state.quotas = quotas
        app.state.admin = AdminService(tenant_rows, UsageRepository(engine), api_keys, quotas,
                                       image_bytes=lambda tenant: app.state.images.used_bytes(tenant))
        app.state.data_path = SandboxDataPath(app.state.sandboxes, node_client)
        app.state.snapshots = SnapshotService(snapshot_rows, app.state.sandboxes, node_client)
        app.state.commits = CommitService(app.state.sandboxes, node_client, app.state.images, app.state.snapshots)
        app.state.rollouts = RolloutService(
            RolloutRepository(engine), app.state.sandboxes, app.state.data_path,
            idle_pause_s=settings.rollout_idle_pause_s, ttl_s=settings.rollout_ttl_s,
            lease_s=settings.rollout_step_lease_s, max_write_bytes=settings.max_upload_mb * 1024 * 1024)
        app.state.swerex = SwerexService(app.state.rollouts, app.state.sandboxes, app.state.data_path,
                                         max_upload_bytes=settings.max_upload_mb * 1024 * 1024)
        sweeper = asyncio.create_task(app.state.rollouts.sweep_forever(settings.rollout_sweep_interval_s))
        app.state.jobs = JobService(JobStore(store.redis), app.state.sandboxes, JobRepository(engine), quotas=quotas)
        app.state.platform_gauges = PlatformGauges(store, JobStore(store.redis))
        await app.state.jobs.resume_submissions()
        # A Redis that lost its data gets its jobs queued again (once the nodes re-registered theirs).
        requeuer = asyncio.create_task(app.state.jobs.requeue_forever(settings.heartbeat_interval_s,
                                                                      grace_s=settings.heartbeat_timeout_s))
        app.state.e2b_processes = ProcessTable(app.state.data_path)
        app.state.e2b_interpreter = Interpreter(app.state.data_path)
        app.state.e2b = E2bSandboxes(app.state.sandboxes, app.state.data_path,
                                     E2bRepository(store.redis, keep_s=settings.e2b_max_timeout_s + 86400), settings,
                                     on_gone=app.state.e2b_interpreter.forget)
        reaper = asyncio.create_task(app.state.e2b.reap_forever(settings.e2b_reaper_interval_s))
        app.state.ui_sessions = UiSessions(store.redis, ttl_s=settings.ui_session_ttl_s)
        app.state.dashboard = DashboardService(app.state)
        sandboxfusion = None
        if settings.sandboxfusion_port:
            if not settings.sandboxfusion_tenant:
                raise ValueError("CORRAL_API_SANDBOXFUSION_PORT needs CORRAL_API_SANDBOXFUSION_TENANT (whose calls "
                                 "they are)")
            sandboxfusion = SandboxFusionServer(app, host=settings.sandboxfusion_host,
                                                port=settings.sandboxfusion_port, tenant=settings.sandboxfusion_tenant)
            await sandboxfusion.start()
        try:
            yield
        finally:
            if sandboxfusion is not None:
                await sandboxfusion.stop()
            reaper.cancel()
            await app.state.e2b_processes.close()
            await app.state.e2b_interpreter.close()
            requeuer.cancel()
            sweeper.cancel()
            await app.state.jobs.close()
            await app.state.rollouts.close()
            await node_client.aclose()
            await images.aclose()
            await image_writes.aclose()
            await bus.close()
            await store.close()
            engine.dispose()

    app = FastAPI(
        title="Corral",
        version="0.1.0",
        description="One API in front of isolated sandboxes for training and evaluating AI agents.",
        lifespan=lifespan,
    )
    install_error_handlers(app, refusal=refused_response)
    app.add_exception_handler(StarletteHTTPException, unknown_route_response)  # type: ignore[arg-type]
    app.add_middleware(TenantConcurrencyMiddleware)
    app.add_middleware(E2bPortRouting)
    app.add_middleware(BodyLimitMiddleware)
    instrument_app(app)
    # Platform-wide numbers (every tenant's): the internal token's, never a tenant key's (corral_common.metrics).
    install_metrics(app, "api", collectors=[on_state(app, "fncall_gauges"), on_state(app, "platform_gauges")],
                    dependencies=METRICS_TOKEN)
    app.include_router(sandboxes_router)
    app.include_router(admin_router)
    app.include_router(usage_router)
    app.include_router(snapshots_router)
    app.include_router(fncall_router)
    app.include_router(rollouts_router)
    app.include_router(jobs_router)
    app.include_router(nodes_router)
    app.include_router(images_router)
    app.include_router(commits_router)
    app.include_router(e2b_router)
    app.include_router(e2b_envd_router)
    app.include_router(e2b_interpreter_router)
    app.include_router(sandboxfusion_router)
    app.include_router(swerex_tokens_router)
    app.include_router(swerex_router)
    install_dashboard(app)

    @app.get("/healthz", tags=["health"], operation_id="healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main() -> None:
    from corral_common.serving import serve

    settings = ApiSettings()
    serve(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level)
