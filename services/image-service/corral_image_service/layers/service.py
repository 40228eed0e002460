"""Turn a tar stream or a directory into an EROFS blob and record it as a layer."""

import shutil
import tarfile
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from corral_common.errors import Conflict, CorralError, NotFound, Unprocessable
from corral_image_service.blobs.service import BlobStore
from corral_image_service.chunks.store import ChunkStore, chunk_blob
from corral_image_service.db.engine import as_utc, session_scope
from corral_image_service.layers.erofs import ErofsBuildError, mkfs_erofs
from corral_image_service.layers.models import Layer
from corral_image_service.layers.repository import LayerRepository
from corral_image_service.layers.schemas import LayerOut
from corral_image_service.layers.tarsafe import safe_extract


def layer_out(layer: Layer) -> LayerOut:
    return LayerOut(kind=layer.kind, name=layer.name, version=layer.version,
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

    def build_from_tar(self, tar_path: str | Path) -> tuple[str, int]:
        root = self.store.tmp_dir(suffix=".rootfs")
        try:
            try:
                safe_extract(tar_path, root)
            except tarfile.FilterError as exc:
                raise Unprocessable(f"unsafe tar member {exc}", loc=["body"], code="unsafe_tar") from exc
            except (tarfile.TarError, EOFError) as exc:
                raise Unprocessable(f"not a readable tar archive: {exc}", loc=["body"], code="invalid_tar") from exc
            return self.build_from_dir(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def register(self, kind: str, name: str, version: str, digest: str, size: int) -> tuple[LayerOut, bool]:
        """Record name:version -> digest. Returns (layer, created). Layers are immutable."""
        with session_scope(self.engine) as session:
            repo = LayerRepository(session)
            existing = repo.get(name, version)
            if existing is None:
                try:
                    return layer_out(repo.add(Layer(kind=kind, name=name, version=version,
                                                    digest=digest, size=size))), True
                except IntegrityError:
                    # Lost a race with a concurrent upload of the same name:version.
                    session.rollback()
                    existing = repo.get(name, version)
                    if existing is None:
                        raise
            if existing.digest != digest or existing.kind != kind:
                raise Conflict(
                    f"layer {name}:{version} already exists as {existing.kind} {existing.digest}; "
                    f"layers are immutable, publish a new version",
                    code="layer_exists",
                    extra={"existing": layer_out(existing).model_dump(mode="json"), "digest": digest},
                )
            return layer_out(existing), False

    def get(self, name: str, version: str) -> LayerOut:
        with session_scope(self.engine) as session:
            layer = LayerRepository(session).get(name, version)
            if layer is None:
                raise NotFound(f"layer {name}:{version} not found", loc=["path", "name"], code="layer_not_found")
            return layer_out(layer)

    def list(self, kind: str | None = None) -> list[LayerOut]:
        with session_scope(self.engine) as session:
            return [layer_out(layer) for layer in LayerRepository(session).list(kind)]
