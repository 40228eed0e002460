from fastapi import APIRouter
from fastapi.responses import FileResponse

from corral_common.web.errors import BadRequest, NotFound
from corral_image_service.blobs.schemas import DIGEST_RE
from corral_image_service.deps import Services, ServicesDep

router = APIRouter(prefix="/v1/blobs", tags=["blobs"])

_RESPONSES = {206: {"description": "Partial content (Range)"}, 400: {"description": "Malformed digest"},
              404: {"description": "Unknown blob"}}


def _blob_response(digest: str, svc: Services) -> FileResponse:
    if not DIGEST_RE.match(digest):
        raise BadRequest("digest must look like sha256:<64 lowercase hex>", loc=["path", "digest"],
                         code="invalid_digest")
    path = svc.store.path_for(digest)
    if not path.is_file():
        raise NotFound(f"blob {digest} not found", loc=["path", "digest"], code="blob_not_found")
    # Content-addressed, so a URL's bytes never change: cache forever, and use the digest
    # (quoted, as HTTP requires) as the strong ETag so If-Range / If-None-Match just work.
    return FileResponse(path, media_type="application/octet-stream", headers={
        "Cache-Control": "public, max-age=31536000, immutable",
        "ETag": f'"{digest}"',
        "X-Corral-Digest": digest,
    })


@router.get("/{digest}", summary="Download a blob (supports Range)", response_class=FileResponse,
            responses=_RESPONSES)
def get_blob(digest: str, svc: ServicesDep) -> FileResponse:
    return _blob_response(digest, svc)


@router.head("/{digest}", summary="Blob metadata", response_class=FileResponse, responses=_RESPONSES)
def head_blob(digest: str, svc: ServicesDep) -> FileResponse:
    return _blob_response(digest, svc)
