"""The public api: auth, validation, sandbox records, and the data-path proxy to node-agents."""

from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException

from corral_api.admin.router import router as admin_router
from corral_api.admin.router import usage_router
from corral_api.body_limits import BodyLimitMiddleware
from corral_api.commits.router import router as commits_router
from corral_api.compat.e2b.envd_router import router as e2b_envd_router
from corral_api.compat.e2b.errors import refused_response, unknown_route_response
from corral_api.compat.e2b.ingress import E2bPortRouting
from corral_api.compat.e2b.interpreter_router import router as e2b_interpreter_router
from corral_api.compat.e2b.router import router as e2b_router
from corral_api.compat.sandboxfusion.router import router as sandboxfusion_router
from corral_api.compat.sandboxfusion.server import SandboxFusionServer
from corral_api.compat.swerex.router import router as swerex_router
from corral_api.compat.swerex.router import tokens as swerex_tokens_router
from corral_api.dataplane.router import router as dataplane_router
from corral_api.deps import check_complete, container_of
from corral_api.fncall.router import router as fncall_router
from corral_api.images.router import router as images_router
from corral_api.jobs.router import router as jobs_router
from corral_api.limits import TenantConcurrencyMiddleware
from corral_api.nodes.router import router as nodes_router
from corral_api.rollouts.router import router as rollouts_router
from corral_api.sandboxes.router import router as sandboxes_router
from corral_api.services import Services, build_services
from corral_api.settings import ApiSettings
from corral_api.snapshots.router import router as snapshots_router
from corral_api.snapshots.router import sandbox_router as sandbox_snapshots_router
from corral_api.ui.router import install_dashboard
from corral_common.logging import configure_logging
from corral_common.telemetry import instrument_app, setup_tracing
from corral_common.web.handlers import install_error_handlers
from corral_common.web.metrics import METRICS_TOKEN, install_metrics


def create_app(settings: ApiSettings | None = None) -> FastAPI:
    settings = settings or ApiSettings()
    configure_logging("api", settings.log_level, settings.log_json)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        setup_tracing("corral-api", settings.otel_exporter_otlp_endpoint)
        async with build_services(settings) as services:
            check_complete(app, services)
            app.state.services = services
            sandboxfusion = None
            if settings.sandboxfusion_port:
                if not settings.sandboxfusion_tenant:
                    raise ValueError("CORRAL_API_SANDBOXFUSION_PORT needs CORRAL_API_SANDBOXFUSION_TENANT (whose "
                                     "calls they are)")
                sandboxfusion = SandboxFusionServer(services, settings, host=settings.sandboxfusion_host,
                                                    port=settings.sandboxfusion_port,
                                                    tenant=settings.sandboxfusion_tenant)
                await sandboxfusion.start()
            try:
                yield
            finally:
                if sandboxfusion is not None:
                    await sandboxfusion.stop()

    # The scrape-time gauges, once the lifespan built the services (nothing before).
    async def fncall_gauges() -> None:
        if isinstance(services := container_of(app), Services):
            await services.fncall.refresh_gauges()

    async def platform_gauges() -> None:
        if isinstance(services := container_of(app), Services):
            await services.platform_gauges()

    app = FastAPI(
        title="Corral",
        version="0.1.0",
        description="One API in front of isolated sandboxes for training and evaluating AI agents.",
        lifespan=lifespan,
    )
    # The app's settings are its only state besides the services: the shared plumbing (the
    # internal and metrics tokens, the body limits) reads them before and outside the lifespan.
    app.state.settings = settings
    install_error_handlers(app, refusal=refused_response)
    app.add_exception_handler(StarletteHTTPException, unknown_route_response)  # type: ignore[arg-type]
    app.add_middleware(TenantConcurrencyMiddleware)
    app.add_middleware(E2bPortRouting)
    app.add_middleware(BodyLimitMiddleware)
    instrument_app(app)
    # Platform-wide numbers (every tenant's): the internal token's, never a tenant key's (corral_common.web.metrics).
    install_metrics(app, "api", collectors=[fncall_gauges, platform_gauges],
                    dependencies=METRICS_TOKEN)
    app.include_router(sandboxes_router)
    app.include_router(dataplane_router)
    app.include_router(sandbox_snapshots_router)
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
    from corral_common.web.serving import serve

    settings = ApiSettings()
    serve(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level)
