"""Scheduler service: placement consumer + node reaper, with /healthz."""

import asyncio
from contextlib import asynccontextmanager

from fastapi import FastAPI

from corral_common.amqp import EventBus
from corral_common.contracts.events import SANDBOX_REQUESTED_KEY, SandboxRequested
from corral_common.logging import configure_logging
from corral_common.store.jobs import JobStore
from corral_common.store.state import StateStore
from corral_common.telemetry import instrument_app, setup_tracing
from corral_common.web.handlers import install_error_handlers
from corral_common.web.internal import INTERNAL_ONLY
from corral_common.web.metrics import install_metrics
from corral_scheduler.deps import Services, ServicesDep
from corral_scheduler.jobs.service import JobAdmitter
from corral_scheduler.metrics import SchedulerGauges
from corral_scheduler.nodes.service import NodeReaper
from corral_scheduler.placement.locality import EnvironmentLayers
from corral_scheduler.placement.service import Placer
from corral_scheduler.settings import SchedulerSettings

REQUESTS_QUEUE = "scheduler.requests"


def create_app(settings: SchedulerSettings | None = None) -> FastAPI:
    settings = settings or SchedulerSettings()
    configure_logging("scheduler", settings.log_level, settings.log_json)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        setup_tracing("corral-scheduler", settings.otel_exporter_otlp_endpoint)
        store = StateStore.from_url(settings.redis_url, **settings.redis_pool())
        bus = await EventBus(settings.amqp_url, publish_timeout_s=settings.amqp_publish_timeout_s).connect()
        environments = (EnvironmentLayers(settings.image_service_url, settings.internal_token)
                        if settings.placement_locality else None)
        placer = Placer(store, bus, settings, environments)
        reaper = NodeReaper(store, bus, settings.heartbeat_timeout_s, settings.reaper_interval_s)
        await bus.consume(REQUESTS_QUEUE, [SANDBOX_REQUESTED_KEY], SandboxRequested, placer.handle,
                          prefetch=settings.placement_prefetch)
        reaper_task = asyncio.create_task(reaper.run())
        # Jobs (many sandboxes per request) queue in Redis and are admitted by fair share.
        jobs = JobStore(store.redis)
        admitter = JobAdmitter(jobs, placer, settings.placement_retry_s)
        admit_task = asyncio.create_task(admitter.run())
        app.state.services = Services(
            settings=settings, store=store, placer=placer, admitter=admitter,
            gauges=SchedulerGauges(store, jobs, placer, settings.heartbeat_timeout_s))
        try:
            yield
        finally:
            admit_task.cancel()
            reaper_task.cancel()
            # Let them end before their bus and store go: a placement cut off mid-publish by a
            # closed channel could otherwise wait for ever (bounded: shutdown must end).
            await asyncio.wait({admit_task, reaper_task}, timeout=10)
            await bus.close()
            await store.close()
            if environments is not None:
                await environments.aclose()

    app = FastAPI(title="Corral scheduler", lifespan=lifespan)
    app.state.settings = settings  # the internal token's check reads it
    install_error_handlers(app)
    instrument_app(app)

    async def gauges() -> None:  # read at each /metrics scrape, once the lifespan built them
        services = getattr(app.state, "services", None)
        if isinstance(services, Services):
            await services.gauges()

    install_metrics(app, "scheduler", collectors=[gauges])

    @app.get("/healthz")
    async def healthz(services: ServicesDep) -> dict[str, str | int]:
        # waiting: requests this replica holds until a node has room (RabbitMQ redelivers
        # them to another replica if this one dies).
        return {"status": "ok", "waiting": services.placer.waiting}

    @app.get("/v1/nodes", dependencies=INTERNAL_ONLY)
    async def nodes(services: ServicesDep) -> list[dict]:
        live = await services.store.live_nodes(settings.heartbeat_timeout_s)
        return [vars(n) for n in live]

    return app


def main() -> None:
    from corral_common.web.serving import serve

    settings = SchedulerSettings()
    serve(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level)
