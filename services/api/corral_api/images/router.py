"""Public image endpoints: layers, environments, storage usage (and imports, imports.py).

Every route is authenticated; a tenant reads its own entries and the shared catalogue's,
writes and deletes only its own (another tenant's are 404, as if they did not exist).
"""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from corral_api.auth.dependencies import Tenant
from corral_api.body_limits import body_limit
from corral_api.deps import provide
from corral_api.images.schemas import Environment, EnvironmentCreate, ImageImport, Layer, LayerKind, StorageUsage
from corral_api.images.service import ImageCatalogService
from corral_common.inputs import NAME_PATTERN, VERSION_PATTERN
from corral_common.web.errors import ERROR_RESPONSES, CorralError, ErrorResponse

router = APIRouter(tags=["images"], responses=ERROR_RESPONSES)

TAR_TYPES = {"application/x-tar", "application/tar", "application/octet-stream", "application/gzip",
             "application/x-gzip"}
Name = Annotated[str, Query(pattern=NAME_PATTERN)]
Version = Annotated[str, Query(pattern=VERSION_PATTERN)]


Catalog = Annotated[ImageCatalogService, Depends(provide(ImageCatalogService))]


def tar_body(request: Request) -> str:
    """The upload's content type (a tar, maybe gzipped), or a 415 (its size: body_limits)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype not in TAR_TYPES:
        raise CorralError(f"unsupported content type {ctype!r}: send application/x-tar",
                          loc=["header", "content-type"], code="unsupported_media_type", status_code=415)
    return ctype


_TAR_BODY = body_limit("image_max_upload_mb", {"requestBody": {"required": True, "content": {
    "application/x-tar": {"schema": {"type": "string", "format": "binary"}}}}})


@router.post("/v1/layers", status_code=201, response_model=Layer, operation_id="upload_layer",
             responses={200: {"model": Layer, "description": "You already had this name:version with this content"},
                        409: {"model": ErrorResponse, "description": "name:version exists with other content"},
                        413: {"model": ErrorResponse,
                              "description": "Too large, or past your storage quota (storage_quota_exceeded)"}},
             openapi_extra=_TAR_BODY)
async def upload_layer(request: Request, tenant: Tenant, catalog: Catalog, kind: LayerKind, name: Name,
                       version: Version) -> JSONResponse:
    """Upload a root filesystem tar (gzip allowed) as an immutable EROFS layer ``name:version``.
    Unsafe members (``..``, absolute paths, links leaving the tree) are 422 ``unsafe_tar``; a
    truncated or unreadable tar 422 ``invalid_tar``; nothing is registered then."""
    ctype = tar_body(request)
    layer, created = await catalog.upload_layer(tenant, kind, name, version, request.stream(), ctype)
    return JSONResponse(layer.model_dump(mode="json"), status_code=201 if created else 200)


@router.get("/v1/layers", response_model=list[Layer], operation_id="list_layers")
async def list_layers(tenant: Tenant, catalog: Catalog, kind: LayerKind | None = None) -> list[Layer]:
    """Your layers and the shared catalogue's."""
    return await catalog.list_layers(tenant, kind)


@router.get("/v1/layers/{name}/{version}", response_model=Layer, operation_id="get_layer")
async def get_layer(name: str, version: str, tenant: Tenant, catalog: Catalog) -> Layer:
    return await catalog.get_layer(tenant, name, version)


@router.delete("/v1/layers/{name}/{version}", response_model=Layer, operation_id="delete_layer",
               responses={409: {"model": ErrorResponse, "description": "An environment uses it (layer_in_use)"}})
async def delete_layer(name: str, version: str, tenant: Tenant, catalog: Catalog) -> Layer:
    """Delete one of your layers (frees its bytes from your quota)."""
    return await catalog.delete_layer(tenant, name, version)


@router.post("/v1/environments", status_code=201, response_model=Environment, operation_id="create_environment",
             responses={200: {"model": Environment, "description": "Identical environment already existed"},
                        409: {"model": ErrorResponse, "description": "Name exists with other layers or config"}})
async def create_environment(body: EnvironmentCreate, tenant: Tenant, catalog: Catalog) -> JSONResponse:
    env, created = await catalog.create_environment(tenant, body)
    return JSONResponse(env.model_dump(mode="json"), status_code=201 if created else 200)


@router.get("/v1/environments", response_model=list[Environment], operation_id="list_environments")
async def list_environments(tenant: Tenant, catalog: Catalog) -> list[Environment]:
    return await catalog.list_environments(tenant)


@router.get("/v1/environments/{name}", response_model=Environment, operation_id="get_environment")
async def get_environment(name: str, tenant: Tenant, catalog: Catalog) -> Environment:
    return await catalog.get_environment(tenant, name)


@router.delete("/v1/environments/{name}", response_model=Environment, operation_id="delete_environment")
async def delete_environment(name: str, tenant: Tenant, catalog: Catalog) -> Environment:
    """Delete one of your environments (its layers stay)."""
    return await catalog.delete_environment(tenant, name)


@router.get("/v1/images/usage", response_model=StorageUsage, operation_id="get_image_usage")
async def get_image_usage(tenant: Tenant, catalog: Catalog) -> StorageUsage:
    return await catalog.usage(tenant)




@router.post("/v1/images/import", status_code=202, response_model=ImageImport, operation_id="import_image",
             responses={201: {"model": ImageImport, "description": "wait=true: imported"},
                        413: {"model": ErrorResponse, "description": "Too large, or past your storage quota"},
                        422: {"model": ErrorResponse, "description": "Not an image, a missing blob, an unsafe "
                                                                     "layer, an unknown reference..."}},
             openapi_extra=body_limit("image_max_upload_mb", {"requestBody": {"required": False, "content": {
                 "application/x-tar": {"schema": {"type": "string", "format": "binary"}}}}}))
async def import_image(
    request: Request, tenant: Tenant, catalog: Catalog, name: Name, version: Version,
    environment: Annotated[str | None, Query(pattern=NAME_PATTERN, description="Default: name")] = None,
    reference: Annotated[str | None, Query(max_length=255, description="repository[:tag] in the operator's "
                                                                       "registry, instead of a body")] = None,
    tag: Annotated[str | None, Query(max_length=128, description="The image of a multi-image OCI layout")] = None,
    split_at: Annotated[int | None, Query(ge=1, le=1000, description="Layers from this index on become a "
                                                                     "workspace layer (default: one base)")] = None,
    wait: Annotated[bool, Query(description="Answer once it has finished (a failure is its 4xx)")] = False,
    timeout: Annotated[float, Query(gt=0, le=3600)] = 600.0,
) -> JSONResponse:
    """Import a ``docker save`` tarball or an OCI image-layout tarball (the body), or
    ``reference`` from the registry the operator configured, as layers ``name:version`` and
    environment ``environment``, carrying the image's Env, WorkingDir, User, Entrypoint, Cmd,
    ExposedPorts and Labels. Runs as a job: 202 and ``GET /v1/images/imports/{id}`` for its
    progress, or ``wait=true``."""
    params = {"name": name, "version": version, "environment": environment, "reference": reference, "tag": tag,
              "split_at": split_at, "wait": str(wait).lower(), "timeout": timeout}
    body, ctype = None, ""
    if reference is None:
        ctype = tar_body(request)
        body = request.stream()
    job, status = await catalog.start_import(tenant, params, body, ctype)
    return JSONResponse(job.model_dump(mode="json"), status_code=status)


@router.get("/v1/images/imports/{import_id}", response_model=ImageImport, operation_id="get_image_import")
async def get_image_import(import_id: str, tenant: Tenant, catalog: Catalog) -> ImageImport:
    return await catalog.get_import(tenant, import_id)
