from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from fastapi import FastAPI

from corral_common.logging import configure_logging, get_logger
from corral_common.web.handlers import install_error_handlers
from corral_common.web.internal import INTERNAL_ONLY
from corral_common.web.metrics import install_metrics
from corral_image_service.blobs.router import router as blobs_router
from corral_image_service.blobs.service import BlobStore
from corral_image_service.chunks.router import router as chunks_router
from corral_image_service.chunks.store import LocalChunkStore
from corral_image_service.db import make_engine, run_migrations
from corral_image_service.deps import Services
from corral_image_service.disk_images.router import router as disk_images_router
from corral_image_service.disk_images.service import DiskImageService
from corral_image_service.environments.router import router as environments_router
from corral_image_service.environments.service import EnvironmentService
from corral_image_service.imports.router import router as imports_router
from corral_image_service.imports.service import ImportService
from corral_image_service.layers.router import router as layers_router
from corral_image_service.layers.router import usage_router
from corral_image_service.layers.service import LayerService
from corral_image_service.metrics import StorageGauges
from corral_image_service.settings import ImageServiceSettings

log = get_logger(__name__)


def create_app(settings: ImageServiceSettings | None = None) -> FastAPI:
    settings = settings or ImageServiceSettings()
    configure_logging("image-service", settings.log_level, settings.log_json)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        store = BlobStore(settings.data_dir)
        Path(settings.data_dir).mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, before serving
        store.ensure_dirs()
        await anyio.to_thread.run_sync(store.clean_tmp)
        chunks = LocalChunkStore(settings.effective_chunk_dir)
        chunks.ensure_dirs()
        engine = make_engine(settings.effective_database_url, **settings.sql_pool())
        await anyio.to_thread.run_sync(run_migrations, engine)
        layers = LayerService(engine, store, settings.mkfs_erofs, chunks=chunks, chunk_size=settings.chunk_size_bytes)
        environments = EnvironmentService(engine)
        # Imports take their own slot: a long one never holds up layer uploads.
        build_limiter = anyio.CapacityLimiter(2)
        imports = ImportService(engine, store, layers, environments, max_unpacked_bytes=settings.max_unpacked_bytes,
                                limiter=anyio.CapacityLimiter(1), registry=settings.registry,
                                registry_tls_verify=settings.registry_tls_verify, skopeo=settings.skopeo,
                                zstd=settings.zstd)
        await anyio.to_thread.run_sync(imports.mark_interrupted)
        app.state.services = Services(
            settings=settings, engine=engine, store=store, chunks=chunks, layers=layers, environments=environments,
            disk_images=DiskImageService(engine, store, settings.qemu_img), build_limiter=build_limiter,
            imports=imports, storage_gauges=StorageGauges(engine),
        )
        log.info("image_service.ready", data_dir=settings.data_dir, db=engine.url.render_as_string(hide_password=True))
        try:
            yield
        finally:
            await imports.close()
            engine.dispose()

    app = FastAPI(title="Corral image-service", version="0.1.0", lifespan=lifespan,
                  description="EROFS layers, environments (layer combinations), VM disk images, "
                              "content-addressed blobs and their chunks.")
    app.state.settings = settings  # the internal token's check reads it
    install_error_handlers(app)

    async def storage_gauges() -> None:  # read at each /metrics scrape, once the lifespan built them
        services = getattr(app.state, "services", None)
        if isinstance(services, Services):
            await services.storage_gauges()

    install_metrics(app, "image-service", collectors=[storage_gauges])
    # Reads too: layers, blobs and chunks are tenants' file systems.
    for router in (layers_router, usage_router, imports_router, environments_router, disk_images_router, blobs_router, chunks_router):
        app.include_router(router, dependencies=INTERNAL_ONLY)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
