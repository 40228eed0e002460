"""The image-service's numbers on its /metrics: uploads, chunk requests, and what it stores
(summed in SQL at scrape: one aggregate query per table)."""

import anyio
from prometheus_client import Counter, Gauge
from sqlalchemy import Engine, func
from sqlmodel import Session, select

from corral_image_service.disk_images.models import DiskImage
from corral_image_service.layers.models import Layer

UPLOADS = Counter("corral_image_uploads_total", "Request bodies spooled (layer tarballs, OCI archives, disk images)",
                  ["kind"])
UPLOAD_BYTES = Counter("corral_image_upload_bytes_total", "Bytes of spooled request bodies", ["kind"])
CHUNK_REQUESTS = Counter("corral_image_chunk_requests_total", "Chunk downloads asked of this service (node lazy "
                         "loaders' cache misses)", ["outcome"])
CHUNK_BYTES = Counter("corral_image_chunk_served_bytes_total", "Chunk bytes served")
STORED_BYTES = Gauge("corral_image_stored_bytes", "Bytes stored, by kind (distinct layer blobs, disk images)", ["kind"])
STORED_OBJECTS = Gauge("corral_image_stored_objects", "Layers and disk images in the catalogue", ["kind"])


class StorageGauges:
    def __init__(self, engine: Engine):
        self.engine = engine

    def _read(self) -> tuple[int, int, int, int]:
        with Session(self.engine) as session:
            distinct = select(Layer.digest, func.max(Layer.size).label("size")).group_by(Layer.digest).subquery()
            layer_bytes = session.exec(select(func.coalesce(func.sum(distinct.c.size), 0))).one()
            layers = session.exec(select(func.count()).select_from(Layer)).one()
            disk_bytes, disks = session.exec(select(func.coalesce(func.sum(DiskImage.size_bytes), 0),
                                                    func.count(DiskImage.id))).one()
        return int(layer_bytes), int(layers), int(disk_bytes), int(disks)

    async def __call__(self) -> None:
        layer_bytes, layers, disk_bytes, disks = await anyio.to_thread.run_sync(self._read)
        STORED_BYTES.labels(kind="layer").set(layer_bytes)
        STORED_BYTES.labels(kind="disk_image").set(disk_bytes)
        STORED_OBJECTS.labels(kind="layer").set(layers)
        STORED_OBJECTS.labels(kind="disk_image").set(disks)
