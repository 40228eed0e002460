"""Per-app singletons, built in the lifespan and read from ``app.state``."""

from dataclasses import dataclass
from typing import Annotated

import anyio
from fastapi import Depends, Request
from sqlalchemy.engine import Engine

from corral_image_service.blobs.service import BlobStore
from corral_image_service.chunks.store import ChunkStore
from corral_image_service.disk_images.service import DiskImageService
from corral_image_service.environments.service import EnvironmentService
from corral_image_service.imports.service import ImportService
from corral_image_service.layers.service import LayerService
from corral_image_service.metrics import StorageGauges
from corral_image_service.settings import ImageServiceSettings


@dataclass
class Services:
    settings: ImageServiceSettings
    engine: Engine
    store: BlobStore
    chunks: ChunkStore
    layers: LayerService
    environments: EnvironmentService
    disk_images: DiskImageService
    # mkfs.erofs and tar extraction are CPU/IO heavy; bound how many run at once so
    # uploads cannot starve the threadpool that also serves blob downloads.
    build_limiter: anyio.CapacityLimiter
    imports: ImportService
    storage_gauges: StorageGauges


async def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]
