"""Memory-manager service (one per node): reports and tunes the host's memory sharing/reclaim.

Host memory (meminfo, KSM, DAMON availability, swap/zram) and the KSM knobs; the reclaim loop
(idle and paused sandboxes paged out into zram) and the balloon loop (VM balloon targets from
guest stats, through the node-agent; KSM policy). What runs where: docs/memory.md.
"""

from contextlib import asynccontextmanager

from fastapi import FastAPI

from corral_common.logging import configure_logging
from corral_common.telemetry import instrument_app, setup_tracing
from corral_common.web.handlers import install_error_handlers
from corral_common.web.metrics import install_metrics
from corral_memory_manager.balloons.router import router as balloons_router
from corral_memory_manager.host.router import router as host_router
from corral_memory_manager.reclaim.router import router as reclaim_router
from corral_memory_manager.services import build_services
from corral_memory_manager.settings import MemoryManagerSettings


def create_app(settings: MemoryManagerSettings | None = None) -> FastAPI:
    settings = settings or MemoryManagerSettings()
    configure_logging(f"memory-manager:{settings.node_id}", settings.log_level, settings.log_json)
    setup_tracing("corral-memory-manager", settings.otel_exporter_otlp_endpoint)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        async with build_services(settings) as services:
            app.state.services = services
            yield

    app = FastAPI(title=f"Corral memory-manager {settings.node_id}", version="0.1.0", lifespan=lifespan,
                  description="Per-node memory: meminfo, KSM, DAMON availability, swap and zram; "
                              "proactive reclaim of idle sandboxes.")
    app.state.settings = settings  # the internal token's check reads it
    install_error_handlers(app)
    instrument_app(app)
    install_metrics(app, "memory-manager")
    app.include_router(host_router)
    app.include_router(reclaim_router)
    app.include_router(balloons_router)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        return {"status": "ok", "node_id": settings.node_id}

    return app


def main() -> None:
    from corral_common.web.serving import serve

    settings = MemoryManagerSettings()
    serve(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level)
