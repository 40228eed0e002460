"""VM disk images (qcow2/raw): validated, stored content-addressed in the blob store, and
named ``name:version`` immutably like layers."""

from pathlib import Path

from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from corral_common.disk_images import DiskImageRefused, inspect_disk_image
from corral_common.web.errors import Conflict, NotFound, Unprocessable
from corral_image_service.blobs.service import BlobStore
from corral_image_service.db.engine import as_utc, session_scope
from corral_image_service.disk_images.models import DiskImage
from corral_image_service.disk_images.repository import DiskImageRepository
from corral_image_service.disk_images.schemas import DiskImageOut


def disk_image_out(image: DiskImage) -> DiskImageOut:
    return DiskImageOut(name=image.name, version=image.version, digest=image.digest, format=image.format,
                        size_bytes=image.size_bytes, virtual_size_bytes=image.virtual_size_bytes,
                        created_at=as_utc(image.created_at))


class DiskImageService:
    def __init__(self, engine: Engine, store: BlobStore, qemu_img: str = "qemu-img"):
        self.engine = engine
        self.store = store
        self.qemu_img = qemu_img

    # Blocking: callers run this in a worker thread.
    def ingest(self, upload: Path, declared_format: str) -> tuple[str, int, int]:
        """Validate the spooled upload and move it into the blob store.

        Returns (digest, size, virtual_size). The upload is consumed either way.
        """
        try:
            try:
                info = inspect_disk_image(str(upload), declared_format, qemu_img=self.qemu_img)
            except DiskImageRefused as exc:
                raise Unprocessable(str(exc), loc=["body"], code=exc.code) from exc
            digest, size = self.store.ingest(upload)
            return digest, size, info.virtual_size
        finally:
            upload.unlink(missing_ok=True)

    def register(self, name: str, version: str, digest: str, fmt: str, size: int,
                 virtual_size: int) -> tuple[DiskImageOut, bool]:
        """Record name:version -> digest. Returns (image, created). Disk images are immutable."""
        with session_scope(self.engine) as session:
            repo = DiskImageRepository(session)
            existing = repo.get(name, version)
            if existing is None:
                try:
                    return disk_image_out(repo.add(DiskImage(
                        name=name, version=version, digest=digest, format=fmt, size_bytes=size,
                        virtual_size_bytes=virtual_size))), True
                except IntegrityError:
                    # Lost a race with a concurrent upload of the same name:version.
                    session.rollback()
                    existing = repo.get(name, version)
                    if existing is None:
                        raise
            if existing.digest != digest:
                raise Conflict(
                    f"disk image {name}:{version} already exists as {existing.digest}; "
                    f"disk images are immutable, publish a new version",
                    code="disk_image_exists",
                    extra={"existing": disk_image_out(existing).model_dump(mode="json"), "digest": digest},
                )
            return disk_image_out(existing), False

    def get(self, name: str, version: str | None = None) -> DiskImageOut:
        """One version, or the most recently created one when ``version`` is None."""
        with session_scope(self.engine) as session:
            repo = DiskImageRepository(session)
            image = repo.latest(name) if version is None else repo.get(name, version)
            if image is None:
                ref = name if version is None else f"{name}:{version}"
                raise NotFound(f"disk image {ref} not found", loc=["path", "name"], code="disk_image_not_found")
            return disk_image_out(image)

    def list(self) -> list[DiskImageOut]:
        with session_scope(self.engine) as session:
            return [disk_image_out(image) for image in DiskImageRepository(session).list()]
