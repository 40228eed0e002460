from typing import Annotated

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from corral_image_service.deps import ServicesDep
from corral_image_service.disk_images.schemas import DiskFormat, DiskImageOut
from corral_image_service.layers.schemas import NAME_PATTERN, VERSION_PATTERN
from corral_image_service.uploads import spool_body

router = APIRouter(prefix="/v1/disk-images", tags=["disk-images"])


@router.post(
    "",
    response_model=DiskImageOut,
    status_code=201,
    summary="Upload a VM disk image (qcow2 or raw) as the request body",
    description="The body is the image file itself, streamed to disk. It is checked with "
                "`qemu-img info`: the format must be the declared one, and qcow2 images naming a "
                "backing file or an external data file are refused (422): QEMU would open that "
                "path on the node. The file is then served by `GET /v1/blobs/{digest}`.",
    responses={200: {"model": DiskImageOut, "description": "Identical image already existed"},
               409: {"description": "name:version exists with a different digest"},
               413: {"description": "Upload larger than max_disk_image_mb"},
               422: {"description": "Not a disk image of the declared format, or not self-contained"}},
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}},
)
async def create_disk_image(
    request: Request,
    svc: ServicesDep,
    name: Annotated[str, Query(pattern=NAME_PATTERN)],
    version: Annotated[str, Query(pattern=VERSION_PATTERN)],
    format: Annotated[DiskFormat, Query()],  # noqa: A002 - the API's parameter name
) -> JSONResponse:
    upload = await spool_body(request, svc.store, limit_bytes=svc.settings.max_disk_image_bytes,
                              limit_setting="max_disk_image_mb", suffix=f".{format.value}",
                              empty_hint="send the image file (application/octet-stream)")
    digest, size, virtual_size = await anyio.to_thread.run_sync(
        svc.disk_images.ingest, upload, format.value, limiter=svc.build_limiter)
    image, created = await anyio.to_thread.run_sync(svc.disk_images.register, name, version, digest,
                                                    format.value, size, virtual_size)
    return JSONResponse(image.model_dump(mode="json"), status_code=201 if created else 200)


@router.get("", response_model=list[DiskImageOut], summary="List disk images")
def list_disk_images(svc: ServicesDep) -> list[DiskImageOut]:
    return svc.disk_images.list()


@router.get("/{name}", response_model=DiskImageOut, summary="The latest version of a disk image",
            responses={404: {"description": "Unknown disk image"}})
def get_latest_disk_image(name: str, svc: ServicesDep) -> DiskImageOut:
    return svc.disk_images.get(name)


@router.get("/{name}/{version}", response_model=DiskImageOut, summary="One version of a disk image",
            responses={404: {"description": "Unknown disk image"}})
def get_disk_image(name: str, version: str, svc: ServicesDep) -> DiskImageOut:
    return svc.disk_images.get(name, version)
