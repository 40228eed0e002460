"""The api's composition root: every object the routes, the middleware and the background tasks
use is built here, once per app, into one typed container (``Services``), and closed here again.
Routes take its parts by type (corral_api.deps.provide); nothing else builds a service."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from corral_api.admin.repository import UsageRepository
from corral_api.admin.service import AdminService
from corral_api.auth.models import OPERATOR_ROLE
from corral_api.auth.service import ApiKeyService, parse_bootstrap_keys
from corral_api.commits.service import CommitService
from corral_api.compat.e2b.interpreter import Interpreter
from corral_api.compat.e2b.processes import ProcessTable
from corral_api.compat.e2b.repository import E2bRepository
from corral_api.compat.e2b.service import E2bSandboxes
from corral_api.compat.swerex.service import SwerexService
from corral_api.dataplane.service import SandboxDataPath
from corral_api.db.engine import make_engine, migrate
from corral_api.deps import Container
from corral_api.fncall.rpc import FncallRpc
from corral_api.fncall.service import FncallService
from corral_api.fncall.warmup import FncallWarmup
from corral_api.images.client import ImageServiceWrites
from corral_api.images.service import ImageCatalogService
from corral_api.jobs.repository import JobRepository
from corral_api.jobs.service import JobService
from corral_api.limits import Authenticator, TenantLimiter
from corral_api.metrics import PlatformGauges
from corral_api.nodes.service import NodeService
from corral_api.quotas.ledger import QuotaLedger
from corral_api.quotas.service import TenantQuotas
from corral_api.rollouts.repository import RolloutRepository
from corral_api.rollouts.service import RolloutService
from corral_api.sandboxes.capacity import NodeCeilings
from corral_api.sandboxes.network import NetworkRules
from corral_api.sandboxes.recorder import RECORDS_QUEUE, TERMINAL_KEYS, TerminalRecorder
from corral_api.sandboxes.repository import HistoryRepository
from corral_api.sandboxes.service import EnvironmentCatalog, SandboxService
from corral_api.sandboxes.waiters import StateWaiters
from corral_api.settings import ApiSettings
from corral_api.snapshots.repository import SnapshotRepository
from corral_api.snapshots.service import SnapshotService
from corral_api.tenants.repository import TenantRepository
from corral_api.ui.service import DashboardService
from corral_api.ui.sessions import UiSessions
from corral_common.amqp import EventBus
from corral_common.contracts.events import SandboxStateChanged, state_routing_keys
from corral_common.contracts.fncall import RUNTIMES
from corral_common.contracts.images import ImageServiceClient
from corral_common.contracts.node_client import NodeAgentClient
from corral_common.contracts.sandboxes import SandboxState
from corral_common.store.jobs import JobStore
from corral_common.store.redis_client import connect
from corral_common.store.state import StateStore


@dataclass
class Services(Container):
    """One of each; a route takes a part by its declared type (corral_api.deps)."""

    settings: ApiSettings
    store: StateStore
    api_keys: ApiKeyService
    # The same object as api_keys, for the middleware below the auth domain (corral_api.limits).
    authenticator: Authenticator
    tenant_limiter: TenantLimiter
    quotas: TenantQuotas
    sandboxes: SandboxService
    data_path: SandboxDataPath
    snapshots: SnapshotService
    images: ImageCatalogService
    commits: CommitService
    admin: AdminService
    rollouts: RolloutService
    swerex: SwerexService
    jobs: JobService
    nodes: NodeService
    platform_gauges: PlatformGauges
    fncall: FncallService
    e2b: E2bSandboxes
    e2b_processes: ProcessTable
    e2b_interpreter: Interpreter
    ui_sessions: UiSessions
    dashboard: DashboardService


def _background(stack: AsyncExitStack, coroutine) -> None:
    """A task that runs while the services do (cancelled first when they close)."""
    task = asyncio.create_task(coroutine)
    stack.callback(task.cancel)


@asynccontextmanager
async def build_services(settings: ApiSettings) -> AsyncIterator[Services]:
    """Connect to SQL, Redis, RabbitMQ, image-service and the nodes; build every service over
    them; start the background loops. Leaving closes it all, in the reverse order."""
    async with AsyncExitStack() as stack:
        database_url = settings.effective_database_url
        if database_url.startswith("sqlite:///"):
            Path(database_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        migrate(database_url)
        engine = make_engine(database_url, **settings.sql_pool())
        stack.callback(engine.dispose)
        store = StateStore.from_url(settings.redis_url, **settings.redis_pool())
        stack.push_async_callback(store.close)
        api_keys = ApiKeyService(engine, store.redis)
        for tenant, key in parse_bootstrap_keys(settings.keys):
            api_keys.add(tenant, key)
        for name, key in parse_bootstrap_keys(settings.operator_keys, "CORRAL_API_OPERATOR_KEYS"):
            api_keys.add(settings.operator_tenant, key, role=OPERATOR_ROLE, name=name)
        tenant_rows = TenantRepository(engine)
        quotas = TenantQuotas(tenant_rows, QuotaLedger(store.redis), api_keys.version)
        bus = await EventBus(settings.amqp_url, publish_timeout_s=settings.amqp_publish_timeout_s).connect()
        stack.push_async_callback(bus.close)
        history = HistoryRepository(engine)
        waiters = StateWaiters()
        image_writes = ImageServiceWrites(settings.image_service_url, settings.internal_token,
                                          max_connections=settings.image_service_max_connections,
                                          pool_timeout_s=settings.http_pool_timeout_s)
        stack.push_async_callback(image_writes.aclose)
        images_client = ImageServiceClient(settings.image_service_url, internal_token=settings.internal_token,
                                           timeout=httpx.Timeout(10.0, pool=settings.http_pool_timeout_s),
                                           limits=httpx.Limits(max_connections=settings.image_service_max_connections))
        stack.push_async_callback(images_client.aclose)
        node_client = NodeAgentClient(settings.internal_token, max_connections=settings.node_max_connections,
                                      pool_timeout_s=settings.http_pool_timeout_s)
        stack.push_async_callback(node_client.aclose)
        await bus.subscribe(state_routing_keys(SandboxState), SandboxStateChanged, waiters.on_event)
        await bus.consume(RECORDS_QUEUE, TERMINAL_KEYS, SandboxStateChanged,
                          TerminalRecorder(store, history, quotas).handle)
        snapshot_rows = SnapshotRepository(engine)
        sandboxes = SandboxService(store, bus, history, waiters, EnvironmentCatalog(images_client),
                                   settings.max_wait_s, snapshots=snapshot_rows,
                                   ceilings=NodeCeilings(store, settings.heartbeat_timeout_s,
                                                         max_disk_mb=settings.max_disk_mb),
                                   network=NetworkRules(settings, store, api_host=settings.host),
                                   quotas=quotas)
        images = ImageCatalogService(image_writes, quota_bytes=settings.image_quota_bytes,
                                     forget_environment=sandboxes.environments.forget,
                                     tenant_quota=quotas.image_quota_bytes)
        admin = AdminService(tenant_rows, UsageRepository(engine), api_keys, quotas, image_bytes=images.used_bytes)
        data_path = SandboxDataPath(sandboxes, node_client)
        snapshots = SnapshotService(snapshot_rows, sandboxes, node_client)
        commits = CommitService(sandboxes, node_client, images, snapshots)
        max_upload_bytes = settings.max_upload_mb * 1024 * 1024
        rollouts = RolloutService(RolloutRepository(engine), sandboxes, data_path,
                                  idle_pause_s=settings.rollout_idle_pause_s, ttl_s=settings.rollout_ttl_s,
                                  lease_s=settings.rollout_step_lease_s, max_write_bytes=max_upload_bytes)
        stack.push_async_callback(rollouts.close)
        swerex = SwerexService(rollouts, sandboxes, data_path, max_upload_bytes=max_upload_bytes)
        _background(stack, rollouts.sweep_forever(settings.rollout_sweep_interval_s))
        jobs = JobService(JobStore(store.redis), sandboxes, JobRepository(engine), quotas=quotas)
        stack.push_async_callback(jobs.close)
        await jobs.resume_submissions()
        # A Redis that lost its data gets its jobs queued again (once the nodes re-registered theirs).
        _background(stack, jobs.requeue_forever(settings.heartbeat_interval_s, grace_s=settings.heartbeat_timeout_s))
        e2b_processes = ProcessTable(data_path)
        stack.push_async_callback(e2b_processes.close)
        e2b_interpreter = Interpreter(data_path)
        stack.push_async_callback(e2b_interpreter.close)
        e2b = E2bSandboxes(sandboxes, data_path,
                           E2bRepository(store.redis, keep_s=settings.e2b_max_timeout_s + 86400), settings,
                           on_gone=e2b_interpreter.forget)
        _background(stack, e2b.reap_forever(settings.e2b_reaper_interval_s))
        rpc = await FncallRpc(settings.amqp_url, RUNTIMES, publish_timeout_s=settings.amqp_publish_timeout_s).connect()
        stack.push_async_callback(rpc.close)
        fncall_redis = connect(settings.redis_url, decode_responses=False, **settings.redis_pool())
        stack.push_async_callback(fncall_redis.aclose)
        fncall = FncallService(rpc, fncall_redis, settings.fncall,
                               FncallWarmup(store, node_client, settings.heartbeat_timeout_s))
        stack.push_async_callback(fncall.close)
        yield Services(
            settings=settings, store=store, api_keys=api_keys, authenticator=api_keys,
            tenant_limiter=TenantLimiter(settings.tenant_max_inflight), quotas=quotas, sandboxes=sandboxes,
            data_path=data_path, snapshots=snapshots, images=images, commits=commits, admin=admin,
            rollouts=rollouts, swerex=swerex, jobs=jobs, nodes=NodeService(store, settings.heartbeat_timeout_s),
            platform_gauges=PlatformGauges(store, JobStore(store.redis)), fncall=fncall, e2b=e2b,
            e2b_processes=e2b_processes, e2b_interpreter=e2b_interpreter,
            ui_sessions=UiSessions(store.redis, ttl_s=settings.ui_session_ttl_s),
            dashboard=DashboardService(sandboxes, store=store, heartbeat_timeout_s=settings.heartbeat_timeout_s,
                                       jobs=jobs, rollouts=rollouts, fncall=fncall, images=images),
        )
