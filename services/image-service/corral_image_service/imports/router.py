from typing import Annotated

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from corral_common.web.errors import BadRequest, CorralError
from corral_image_service.deps import ServicesDep
from corral_image_service.imports.schemas import ImportOut
from corral_image_service.imports.service import REFERENCE_PATTERN
from corral_image_service.layers.router import Owner
from corral_image_service.layers.schemas import NAME_PATTERN, VERSION_PATTERN
from corral_image_service.uploads import spool_body

router = APIRouter(prefix="/v1/imports", tags=["imports"])

_ARCHIVE_TYPES = {"", "application/x-tar", "application/tar", "application/octet-stream", "application/gzip",
                  "application/x-gzip"}


@router.post("", response_model=ImportOut, status_code=202,
             summary="Import a docker save / OCI layout tarball, or pull a reference from the configured registry",
             responses={201: {"model": ImportOut, "description": "wait=true: the import finished"}},
             openapi_extra={"requestBody": {"required": False, "content": {
                 "application/x-tar": {"schema": {"type": "string", "format": "binary"}}}}})
async def create_import(
    request: Request, svc: ServicesDep,
    name: Annotated[str, Query(pattern=NAME_PATTERN, description="Layer name (and environment name by default)")],
    version: Annotated[str, Query(pattern=VERSION_PATTERN)],
    owner: Owner = "",
    environment: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    reference: Annotated[str | None, Query(max_length=255, pattern=REFERENCE_PATTERN,
                                           description="repository[:tag] in the configured registry")] = None,
    tag: Annotated[str | None, Query(max_length=128, description="Which image of a multi-image OCI layout")] = None,
    split_at: Annotated[int | None, Query(ge=1, le=1000, description="Layers from this index on become a workspace")] = None,
    quota_bytes: Annotated[int | None, Query(ge=0)] = None,
    wait: Annotated[bool, Query(description="Answer when the import has finished (or failed)")] = False,
    timeout: Annotated[float, Query(gt=0, le=3600)] = 600.0,
) -> JSONResponse:
    imports = svc.imports
    source = None
    if reference is not None:
        imports.check_reference(reference)
    else:
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype not in _ARCHIVE_TYPES:
            raise CorralError(f"unsupported content type {ctype!r}: send the archive as application/x-tar",
                              loc=["header", "content-type"], code="unsupported_media_type", status_code=415)
        path = await spool_body(request, svc.store, limit_bytes=svc.settings.max_upload_bytes,
                                limit_setting="max_upload_mb", suffix=".image.tar",
                                empty_hint="send a docker save or OCI image layout tarball, or give reference=")
        try:
            await anyio.to_thread.run_sync(imports.validate_archive, str(path), tag, limiter=svc.build_limiter)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        source = str(path)
    job = await imports.start(owner, name, version, source=source, reference=reference,
                              environment=environment or name, split_at=split_at, tag=tag, quota_bytes=quota_bytes)
    if not wait:
        return JSONResponse(job.model_dump(mode="json"), status_code=202)
    await imports.wait(job.id, timeout)
    job = await anyio.to_thread.run_sync(imports.get, job.id, owner)
    if job.state == "failed" and job.error is not None:
        raise CorralError(job.error.message, loc=job.error.loc, code=job.error.code, status_code=job.error.status,
                          extra={"import": job.model_dump(mode="json")})
    return JSONResponse(job.model_dump(mode="json"), status_code=201 if job.state == "succeeded" else 202)


@router.get("/{import_id}", response_model=ImportOut, summary="An import's state and progress")
def get_import(import_id: str, svc: ServicesDep, owner: Owner = "") -> ImportOut:
    if len(import_id) > 64:
        raise BadRequest("no such import id", loc=["path", "import_id"])
    return svc.imports.get(import_id, owner)
