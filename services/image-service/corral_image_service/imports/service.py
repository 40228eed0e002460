"""Image imports as jobs: archive (or registry pull) -> flattened tree(s) -> EROFS layers ->
an environment carrying the image's config. Progress and outcome are SQL rows.

A job runs in a worker thread (under the service's build limiter); its state is written as it
goes so ``GET /v1/imports/{id}`` shows progress. Nothing is registered until every layer has
been applied and built: a failure at any step leaves no layer, no environment and no blob
(blobs a failed registration built are collected again). A job that was running when the
service stopped is marked failed (``interrupted``) at the next start.
"""

import asyncio
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from typing import Any

import anyio
from sqlalchemy.engine import Engine
from sqlmodel import select

from corral_common.contracts.images import ImageConfig
from corral_common.logging import get_logger
from corral_common.web.errors import CorralError, NotFound, Unprocessable
from corral_image_service.blobs.service import BlobStore
from corral_image_service.db.engine import as_utc, session_scope, utcnow
from corral_image_service.environments.schemas import EnvironmentIn
from corral_image_service.environments.service import EnvironmentService
from corral_image_service.imports.archive import OpenArchive
from corral_image_service.imports.config import image_config
from corral_image_service.imports.decompress import decompress_layer
from corral_image_service.imports.flatten import Budget, Flattener, LayerError
from corral_image_service.imports.models import ImportJob
from corral_image_service.imports.schemas import ImportError_, ImportOut, ImportProgress, ImportResult
from corral_image_service.layers.service import LayerService

log = get_logger(__name__)

# A repository path and a tag or digest, without a host: pulls only ever go to the
# operator's registry (a caller-chosen host would make image-service fetch any URL).
REFERENCE_PATTERN = r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})?$"
_REFERENCE = re.compile(REFERENCE_PATTERN.removesuffix("$") + r"\Z")
WORKSPACE_SUFFIX = ".ws"


def import_out(job: ImportJob) -> ImportOut:
    return ImportOut(id=job.id, owner=job.owner, name=job.name, version=job.version, state=job.state,
                     progress=ImportProgress.model_validate_json(job.progress),
                     error=ImportError_.model_validate_json(job.error) if job.error else None,
                     result=ImportResult.model_validate_json(job.result) if job.result else None,
                     created_at=as_utc(job.created_at), updated_at=as_utc(job.updated_at))


class ImportService:
    def __init__(self, engine: Engine, store: BlobStore, layers: LayerService, environments: EnvironmentService, *,
                 max_unpacked_bytes: int, limiter: anyio.CapacityLimiter, registry: str = "",
                 registry_tls_verify: bool = True, skopeo: str = "skopeo", zstd: str = "zstd"):
        self.engine, self.store, self.layers, self.environments = engine, store, layers, environments
        self.max_unpacked_bytes = max_unpacked_bytes
        self.limiter = limiter
        self.registry, self.registry_tls_verify, self.skopeo, self.zstd = registry, registry_tls_verify, skopeo, zstd
        self._tasks: set[asyncio.Task] = set()
        self._done: dict[str, asyncio.Event] = {}

    # ---- records -------------------------------------------------------------------------

    def mark_interrupted(self) -> None:
        with session_scope(self.engine) as session:
            for job in session.exec(select(ImportJob).where(ImportJob.state.in_(("queued", "running")))):
                job.state = "failed"
                job.error = ImportError_(status=503, code="interrupted",
                                         message="image-service restarted during the import; import again").model_dump_json()
                job.updated_at = utcnow()
                session.add(job)
            session.commit()

    def get(self, job_id: str, owner: str) -> ImportOut:
        with session_scope(self.engine) as session:
            job = session.get(ImportJob, job_id)
            if job is None or job.owner != owner:
                raise NotFound(f"import {job_id} not found", loc=["path", "import_id"], code="import_not_found")
            return import_out(job)

    def _update(self, job_id: str, **fields: Any) -> None:
        with session_scope(self.engine) as session:
            job = session.get(ImportJob, job_id)
            for key, value in fields.items():
                setattr(job, key, value)
            job.updated_at = utcnow()
            session.add(job)
            session.commit()

    def _progress(self, job_id: str, progress: ImportProgress) -> None:
        self._update(job_id, progress=progress.model_dump_json())

    # ---- starting ------------------------------------------------------------------------

    def check_reference(self, reference: str) -> None:
        if not self.registry:
            raise Unprocessable("this server has no registry configured (CORRAL_IMAGE_REGISTRY): upload a "
                                "docker save or OCI layout tarball instead", loc=["query", "reference"],
                                code="registry_not_configured")
        if not _REFERENCE.match(reference):
            raise Unprocessable(f"{reference!r} is not a repository[:tag|@digest] of the configured registry "
                                f"(no host: pulls go to {self.registry})", loc=["query", "reference"],
                                code="invalid_reference")

    def validate_archive(self, path: str, tag: str | None) -> int:
        """The archive's structure (every blob its manifests name is there): 422 otherwise.
        Returns the number of its layers."""
        with OpenArchive(path) as archive:
            return len(archive.read(tag).layers)

    async def start(self, owner: str, name: str, version: str, *, source: str | None, reference: str | None,
                    environment: str, split_at: int | None, tag: str | None, quota_bytes: int | None) -> ImportOut:
        job = ImportJob(id=f"imp-{secrets.token_hex(8)}", owner=owner, name=name, version=version, state="queued",
                        progress=ImportProgress().model_dump_json())
        with session_scope(self.engine) as session:
            session.add(job)
            session.commit()
            out = import_out(job)
        self._done[job.id] = asyncio.Event()
        task = asyncio.create_task(self._run(job.id, owner, name, version, source, reference, environment,
                                             split_at, tag, quota_bytes))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return out

    async def wait(self, job_id: str, timeout_s: float) -> None:
        event = self._done.get(job_id)
        if event is not None:
            with anyio.move_on_after(timeout_s):
                await event.wait()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self, job_id: str, *args: Any) -> None:
        try:
            result = await anyio.to_thread.run_sync(self._import, job_id, *args, limiter=self.limiter)
            self._update(job_id, state="succeeded", result=result.model_dump_json())
        except CorralError as exc:
            self._fail(job_id, exc.status_code, exc.code, exc.message, exc.loc)
        except LayerError as exc:
            status = 413 if exc.code == "image_too_large" else 422
            self._fail(job_id, status, exc.code, str(exc), ["body"])
        except asyncio.CancelledError:
            self._fail(job_id, 503, "interrupted", "image-service stopped during the import; import again", None)
            raise
        except Exception as exc:
            log.exception("import.failed", import_id=job_id)
            self._fail(job_id, 500, "import_failed", f"import failed: {exc.__class__.__name__}", None)
        finally:
            event = self._done.pop(job_id, None)
            if event is not None:
                event.set()
            source = args[3]
            if source:
                await anyio.Path(source).unlink(missing_ok=True)

    def _fail(self, job_id: str, status: int, code: str, message: str, loc: list | None) -> None:
        self._update(job_id, state="failed",
                     error=ImportError_(status=status, code=code, message=message, loc=loc).model_dump_json())

    # ---- the work (a worker thread) ------------------------------------------------------

    def _pull(self, job_id: str, reference: str, into: str) -> str:
        self._progress(job_id, ImportProgress(step="pulling"))
        layout = os.path.join(into, "layout")
        tag = reference.rsplit(":", 1)[1] if ":" in reference.rsplit("/", 1)[-1] else "latest"
        cmd = [self.skopeo, "--insecure-policy", "copy", "--quiet",
               f"--src-tls-verify={'true' if self.registry_tls_verify else 'false'}",
               f"docker://{self.registry}/{reference}", f"oci:{layout}:{tag}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
        except FileNotFoundError as exc:
            raise CorralError(f"{self.skopeo} not found: install skopeo", code="registry_unavailable",
                              status_code=503) from exc
        if proc.returncode != 0:
            err = (proc.stderr or proc.stdout).strip()[-500:]
            missing = "manifest unknown" in err or "not found" in err.lower() or "name unknown" in err
            raise CorralError(f"pulling {reference} from {self.registry} failed: {err}",
                              loc=["query", "reference"], code="image_not_found" if missing else "registry_error",
                              status_code=422 if missing else 502)
        return layout

    def _import(self, job_id: str, owner: str, name: str, version: str, source: str | None, reference: str | None,
                environment: str, split_at: int | None, tag: str | None, quota_bytes: int | None) -> ImportResult:
        self._update(job_id, state="running")
        work = tempfile.mkdtemp(dir=self.store.tmp, suffix=".import")
        timings: dict[str, float] = {}
        mark = time.monotonic()

        def lap(step: str) -> None:
            nonlocal mark
            now = time.monotonic()
            timings[step] = round(now - mark, 3)
            mark = now

        try:
            path = self._pull(job_id, reference, work) if reference else source
            lap("pull")
            with OpenArchive(path) as archive:
                image = archive.read(tag if not reference else None)
                n = len(image.layers)
                if split_at is not None and not 0 < split_at < n:
                    raise Unprocessable(f"split_at must be between 1 and {n - 1} for an image of {n} layers",
                                        loc=["query", "split_at"], code="invalid_split")
                budget = Budget(self.max_unpacked_bytes)
                trees = [os.path.join(work, "base")] + ([os.path.join(work, "workspace")] if split_at else [])
                for tree in trees:
                    os.mkdir(tree, 0o755)
                flatteners = [Flattener(trees[0], budget)] + (
                    [Flattener(trees[1], budget, overlay=True)] if split_at else [])
                progress = ImportProgress(step="unpacking", layers_total=n)
                try:
                    for i, layer in enumerate(image.layers):
                        flattener = flatteners[1] if split_at is not None and i >= split_at else flatteners[0]
                        plain = os.path.join(work, f"layer-{i}.tar")
                        reader = archive.open_layer(layer)
                        try:
                            with open(plain, "wb") as out:
                                decompress_layer(reader, layer.compression, out, 2 * self.max_unpacked_bytes,
                                                 f"layer {i}", self.zstd)
                            reader.read()  # the rest (a gzip member's trailer), for the digest
                        finally:
                            reader.close()
                        if layer.digest and reader.digest() != layer.digest:
                            raise Unprocessable(f"layer {i}: its bytes hash to {reader.digest()}, not {layer.digest}",
                                                loc=["body", "manifest", "layers", i], code="digest_mismatch")
                        try:
                            flattener.apply(plain)
                        except LayerError as exc:
                            raise LayerError(f"layer {i}: {exc}", exc.code) from exc
                        os.unlink(plain)
                        progress.layers_done, progress.bytes_unpacked = i + 1, budget.used
                        self._progress(job_id, progress)
                    # User names resolve against the base's /etc/passwd and /etc/group.
                    config = image_config(image.config, flatteners[0].root)
                finally:
                    for flattener in flatteners:
                        flattener.close()
            lap("unpack")
            progress.step = "building"
            self._progress(job_id, progress)
            built: list[tuple[str, int]] = []
            try:
                for tree in trees:
                    built.append(self.layers.build_from_dir(tree))
                lap("build")
                progress.step = "registering"
                self._progress(job_id, progress)
            except BaseException:
                for digest, _ in built:
                    self.layers.collect(digest)
                raise
            result = self._register(owner, name, version, environment, built, config, image.format, n, quota_bytes)
            lap("register")
            return result.model_copy(update={"timings": timings})
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _register(self, owner: str, name: str, version: str, environment: str, built: list[tuple[str, int]],
                  config: ImageConfig, fmt: str, n: int, quota_bytes: int | None) -> ImportResult:
        kinds = ["base", "workspace"]
        names = [name, f"{name[:64 - len(WORKSPACE_SUFFIX)]}{WORKSPACE_SUFFIX}"]
        made = []
        try:
            for i, (digest, size) in enumerate(built):
                layer, created = self.layers.register(kinds[i], names[i], version, digest, size, owner=owner,
                                                      quota_bytes=quota_bytes)
                made.append((layer, created))
            refs = [layer.ref for layer, _ in made]
            self.environments.create(EnvironmentIn(name=environment, base=refs[0],
                                                   workspace=refs[1] if len(refs) > 1 else None, config=config), owner)
        except BaseException:
            # All or nothing: the layers this import registered go again (with their blobs).
            for layer, created in made:
                if created:
                    try:
                        self.layers.delete(layer.name, layer.version, owner)
                    except CorralError:
                        pass
            for digest, _ in built:
                self.layers.collect(digest)
            raise
        return ImportResult(environment=environment, layers=refs, digests=[d for d, _ in built], format=fmt,
                            source_layers=n, config=json.loads(config.model_dump_json()))
