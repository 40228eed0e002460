"""Turn a tar stream or a directory into an EROFS blob and record it as a layer."""

import json
import shutil
import tarfile
import threading
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, func, select

from corral_common.web.errors import Conflict, CorralError, NotFound, PayloadTooLarge, Unprocessable
from corral_image_service.blobs.service import BlobStore
from corral_image_service.chunks.store import ChunkStore, chunk_blob
from corral_image_service.db.engine import as_utc, session_scope
from corral_image_service.disk_images.models import DiskImage
from corral_image_service.environments.models import Environment
from corral_image_service.imports.flatten import Budget, Flattener, LayerError
from corral_image_service.layers.erofs import ErofsBuildError, mkfs_erofs
from corral_image_service.layers.models import SHARED_OWNER, Layer
from corral_image_service.layers.repository import LayerRepository
from corral_image_service.layers.schemas import LayerOut, StorageUsage
from corral_image_service.layers.tarsafe import TooLargeError, safe_extract

# Registering, deleting and collecting a blob are one step per process: a blob a concurrent
# upload is about to name is never collected under it (one image-service replica per store;
# see docs/images.md for more).
STORE_LOCK = threading.RLock()


def layer_out(layer: Layer) -> LayerOut:
    return LayerOut(owner=layer.owner, kind=layer.kind, name=layer.name, version=layer.version,
                    ref=f"{layer.name}:{layer.version}", digest=layer.digest, size=layer.size,
                    created_at=as_utc(layer.created_at))


class LayerService:
    def __init__(self, engine: Engine, store: BlobStore, mkfs: str = "mkfs.erofs", *,
                 chunks: ChunkStore | None = None, chunk_size: int = 512 * 1024):
        self.engine = engine
        self.store = store
        self.mkfs = mkfs
        self.chunks = chunks
        self.chunk_size = chunk_size

    # Blocking: callers run these in a worker thread.
    def build_from_dir(self, src_dir: str | Path) -> tuple[str, int]:
        out = self.store.tmp_file(suffix=".erofs")
        try:
            mkfs_erofs(src_dir, out, self.mkfs)
            digest, size = self.store.ingest(out)
            if self.chunks is not None and self.chunks.get_index(digest) is None:
                # Chunked at creation, so the first lazy read never waits for it.
                chunk_blob(self.chunks, digest, self.store.path_for(digest), self.chunk_size)
            return digest, size
        except ErofsBuildError as exc:
            raise CorralError(str(exc), code="build_failed", status_code=500) from exc
        finally:
            out.unlink(missing_ok=True)

    def build_from_tar(self, tar_path: str | Path, max_unpacked_bytes: int | None = None) -> tuple[str, int]:
        root = self.store.tmp_dir(suffix=".rootfs")
        try:
            try:
                safe_extract(tar_path, root, max_unpacked_bytes=max_unpacked_bytes)
            except TooLargeError as exc:
                raise PayloadTooLarge(f"unpacked layer too large: {exc}", loc=["body"], code="layer_too_large",
                                      extra={"limit_bytes": exc.limit}) from exc
            except tarfile.FilterError as exc:
                raise Unprocessable(f"unsafe tar member {exc}", loc=["body"], code="unsafe_tar") from exc
            except (tarfile.TarError, EOFError) as exc:
                raise Unprocessable(f"not a readable tar archive: {exc}", loc=["body"], code="invalid_tar") from exc
            return self.build_from_dir(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def build_from_diff_tar(self, tar_path: str | Path, max_unpacked_bytes: int) -> tuple[str, int]:
        """A ``diff`` layer from an OCI layer tar (``.wh.`` whiteouts, opaque markers): built in
        overlay form (0:0 whiteout devices, ``trusted.overlay.opaque``) to stack above others."""
        root = self.store.tmp_dir(suffix=".diff")
        try:
            flattener = Flattener(str(root), Budget(max_unpacked_bytes), overlay=True)
            try:
                flattener.apply(str(tar_path))
            except LayerError as exc:
                if exc.code == "image_too_large":
                    raise PayloadTooLarge(str(exc), loc=["body"], code="layer_too_large") from exc
                raise Unprocessable(str(exc), loc=["body"], code="unsafe_tar" if exc.code == "unsafe_image"
                                    else "invalid_tar") from exc
            finally:
                flattener.close()
            return self.build_from_dir(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def register(self, kind: str, name: str, version: str, digest: str, size: int, *,
                 owner: str = SHARED_OWNER, quota_bytes: int | None = None) -> tuple[LayerOut, bool]:
        """Record owner's name:version -> digest. Returns (layer, created). Layers are
        immutable. Past ``quota_bytes`` (the owner's distinct blobs) it is refused with 413
        ``storage_quota_exceeded`` and a blob nobody else names is removed again."""
        with STORE_LOCK, session_scope(self.engine) as session:
            repo = LayerRepository(session)
            existing = repo.get(name, version, owner)
            if existing is None:
                if quota_bytes is not None:
                    used, _ = repo.usage(owner, excluding_digest=digest)
                    if used + size > quota_bytes:
                        self._collect(session, digest)
                        raise PayloadTooLarge(
                            f"storing {size} bytes would take this tenant's images to {used + size} bytes, "
                            f"past its quota of {quota_bytes}; delete layers first",
                            loc=["body"], code="storage_quota_exceeded",
                            extra={"used_bytes": used, "quota_bytes": quota_bytes, "size": size})
                try:
                    return layer_out(repo.add(Layer(owner=owner, kind=kind, name=name, version=version,
                                                    digest=digest, size=size))), True
                except IntegrityError:
                    # Lost a race with a concurrent upload of the same name:version.
                    session.rollback()
                    existing = repo.get(name, version, owner)
                    if existing is None:
                        raise
            if existing.digest != digest or existing.kind != kind:
                self._collect(session, digest)
                raise Conflict(
                    f"layer {name}:{version} already exists as {existing.kind} {existing.digest}; "
                    f"layers are immutable, publish a new version",
                    code="layer_exists",
                    extra={"existing": layer_out(existing).model_dump(mode="json"), "digest": digest},
                )
            return layer_out(existing), False

    def delete(self, name: str, version: str, owner: str = SHARED_OWNER) -> LayerOut:
        """Forget owner's layer (never another owner's, never the shared catalogue's for a
        tenant); 409 ``layer_in_use`` while an environment names it. The blob goes with the
        last layer naming it (chunks stay: they are shared by digest and immutable)."""
        with STORE_LOCK, session_scope(self.engine) as session:
            repo = LayerRepository(session)
            layer = repo.get(name, version, owner)
            if layer is None:
                raise NotFound(f"layer {name}:{version} not found", loc=["path", "name"], code="layer_not_found")
            users = environments_using(session, layer.id)
            if users:
                raise Conflict(f"layer {name}:{version} is used by environment(s) {', '.join(sorted(users))}; "
                               f"delete those first", loc=["path", "name"], code="layer_in_use",
                               extra={"environments": sorted(users)})
            out = layer_out(layer)
            repo.delete(layer)
            self._collect(session, layer.digest)
            return out

    def usage(self, owner: str) -> StorageUsage:
        with session_scope(self.engine) as session:
            used, count = LayerRepository(session).usage(owner)
            return StorageUsage(owner=owner, bytes=used, layers=count)

    def collect(self, digest: str) -> None:
        """Remove blob ``digest`` unless a layer or disk image names it."""
        with STORE_LOCK, session_scope(self.engine) as session:
            self._collect(session, digest)

    def _collect(self, session: Session, digest: str) -> None:
        """Remove a blob no layer or disk image names (caller holds STORE_LOCK)."""
        if LayerRepository(session).digest_referenced(digest):
            return
        if session.exec(select(func.count()).select_from(DiskImage).where(DiskImage.digest == digest)).one():
            return
        self.store.path_for(digest).unlink(missing_ok=True)

    def get(self, name: str, version: str, owner: str = SHARED_OWNER) -> LayerOut:
        with session_scope(self.engine) as session:
            layer = LayerRepository(session).visible(name, version, owner)
            if layer is None:
                raise NotFound(f"layer {name}:{version} not found", loc=["path", "name"], code="layer_not_found")
            return layer_out(layer)

    def list(self, kind: str | None = None, owner: str = SHARED_OWNER) -> list[LayerOut]:
        with session_scope(self.engine) as session:
            return [layer_out(layer) for layer in LayerRepository(session).list(kind, owner)]


def environments_using(session: Session, layer_id: int) -> set[str]:
    """Names of the environments (of any owner) that stack layer ``layer_id``."""
    slots = (Environment.base_layer_id == layer_id) | (Environment.workspace_layer_id == layer_id) | (
        Environment.toolkit_layer_id == layer_id)
    names = {env.name for env in session.exec(select(Environment).where(slots))}
    for env in session.exec(select(Environment).where(Environment.diff_layer_ids.is_not(None))):
        if layer_id in json.loads(env.diff_layer_ids or "[]"):
            names.add(env.name)
    return names
