from pathlib import Path
from typing import Annotated

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from corral_common.web.errors import CorralError, Unprocessable
from corral_image_service.deps import ServicesDep
from corral_image_service.layers.schemas import (
    NAME_PATTERN,
    OWNER_PATTERN,
    VERSION_PATTERN,
    LayerKind,
    LayerOut,
    StorageUsage,
)
from corral_image_service.uploads import spool_body

router = APIRouter(prefix="/v1/layers", tags=["layers"])
usage_router = APIRouter(prefix="/v1/usage", tags=["layers"])

# Whose catalogue a call reads or writes: a tenant (the api passes the caller's), or "" for
# the operator's shared one. Reads see the owner's own entries and the shared ones.
Owner = Annotated[str, Query(pattern=OWNER_PATTERN, description="Tenant; empty: the shared catalogue")]

_TAR_TYPES = {"", "application/x-tar", "application/tar", "application/octet-stream",
              "application/gzip", "application/x-gzip"}


@router.post(
    "",
    response_model=LayerOut,
    status_code=201,
    summary="Build an EROFS layer from a tar stream (or a server-side directory)",
    responses={200: {"model": LayerOut, "description": "Identical layer already existed"},
               409: {"description": "name:version exists with a different digest"},
               413: {"description": "Upload larger than max_upload_mb"}},
    openapi_extra={"requestBody": {"required": False, "content": {
        "application/x-tar": {"schema": {"type": "string", "format": "binary"}}}}},
)
async def create_layer(
    request: Request,
    svc: ServicesDep,
    kind: Annotated[LayerKind, Query()],
    name: Annotated[str, Query(pattern=NAME_PATTERN)],
    version: Annotated[str, Query(pattern=VERSION_PATTERN)],
    source_dir: Annotated[str | None, Query(description="Absolute server-side directory (dev only)")] = None,
    owner: Owner = "",
    quota_bytes: Annotated[int | None, Query(ge=0, description="Refuse (413) past this many bytes for owner")] = None,
) -> JSONResponse:
    if source_dir is not None:
        if not svc.settings.allow_source_dir:
            raise CorralError("source_dir is disabled on this server (CORRAL_IMAGE_ALLOW_SOURCE_DIR)",
                              loc=["query", "source_dir"], code="source_dir_disabled", status_code=403)
        if not Path(source_dir).is_absolute() or not await anyio.Path(source_dir).is_dir():
            raise Unprocessable(f"{source_dir!r} is not an absolute path to a directory",
                                loc=["query", "source_dir"], code="invalid_source_dir")
        digest, size = await anyio.to_thread.run_sync(svc.layers.build_from_dir, source_dir,
                                                      limiter=svc.build_limiter)
    else:
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype not in _TAR_TYPES:
            raise CorralError(f"unsupported content type {ctype!r}: send application/x-tar",
                              loc=["header", "content-type"], code="unsupported_media_type", status_code=415)
        tar_path = await spool_body(request, svc.store, limit_bytes=svc.settings.max_upload_bytes,
                                    limit_setting="max_upload_mb", suffix=".tar",
                                    empty_hint="send a tar stream (application/x-tar) or use source_dir")
        # A diff layer (a commit, or any OCI layer tar) keeps its deletions as overlay whiteouts.
        build = svc.layers.build_from_diff_tar if kind is LayerKind.diff else svc.layers.build_from_tar
        try:
            digest, size = await anyio.to_thread.run_sync(build, tar_path, svc.settings.max_unpacked_bytes,
                                                          limiter=svc.build_limiter)
        finally:
            tar_path.unlink(missing_ok=True)
    layer, created = await anyio.to_thread.run_sync(
        lambda: svc.layers.register(kind.value, name, version, digest, size, owner=owner, quota_bytes=quota_bytes))
    return JSONResponse(layer.model_dump(mode="json"), status_code=201 if created else 200)


@router.get("", response_model=list[LayerOut], summary="List layers")
def list_layers(svc: ServicesDep, kind: LayerKind | None = None, owner: Owner = "") -> list[LayerOut]:
    return svc.layers.list(kind.value if kind else None, owner)


@router.get("/{name}/{version}", response_model=LayerOut, summary="Get one layer",
            responses={404: {"description": "Unknown layer"}})
def get_layer(name: str, version: str, svc: ServicesDep, owner: Owner = "") -> LayerOut:
    return svc.layers.get(name, version, owner)


@router.delete("/{name}/{version}", response_model=LayerOut, summary="Delete one of owner's layers",
               responses={404: {"description": "Unknown layer"}, 409: {"description": "An environment uses it"}})
def delete_layer(name: str, version: str, svc: ServicesDep, owner: Owner = "") -> LayerOut:
    return svc.layers.delete(name, version, owner)


@usage_router.get("", response_model=StorageUsage, summary="Bytes of layers an owner holds")
def get_usage(svc: ServicesDep, owner: Owner = "") -> StorageUsage:
    return svc.layers.usage(owner)
