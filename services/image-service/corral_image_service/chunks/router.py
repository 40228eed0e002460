from pathlib import Path

import anyio
from fastapi import APIRouter, Query
from fastapi.responses import FileResponse, JSONResponse, Response

from corral_common.web.errors import BadRequest, NotFound
from corral_image_service import metrics
from corral_image_service.blobs.schemas import DIGEST_RE
from corral_image_service.chunks.schemas import ChunkIndexOut
from corral_image_service.chunks.store import chunk_blob
from corral_image_service.deps import Services, ServicesDep

router = APIRouter(prefix="/v1", tags=["chunks"])

# Content-addressed: a URL's bytes never change.
_IMMUTABLE = "public, max-age=31536000, immutable"


def _check(digest: str) -> None:
    if not DIGEST_RE.match(digest):
        raise BadRequest("digest must look like sha256:<64 lowercase hex>", loc=["path", "digest"],
                         code="invalid_digest")


async def blob_index(svc: Services, digest: str) -> dict:
    """The blob's chunk index; built on first request for blobs stored before chunking."""
    index = await anyio.to_thread.run_sync(svc.chunks.get_index, digest)
    if index is not None:
        return index
    if not svc.store.exists(digest):
        raise NotFound(f"blob {digest} not found", loc=["path", "digest"], code="blob_not_found")
    index, _new = await anyio.to_thread.run_sync(chunk_blob, svc.chunks, digest, svc.store.path_for(digest),
                                                 svc.settings.chunk_size_bytes, limiter=svc.build_limiter)
    return index


@router.get("/indexes/{digest}", response_model=ChunkIndexOut, summary="Chunk index of a blob (by the blob digest)",
            responses={400: {"description": "Malformed digest"}, 404: {"description": "Unknown blob"}})
async def get_blob_index(digest: str, svc: ServicesDep) -> JSONResponse:
    _check(digest)
    index = await blob_index(svc, digest)
    return JSONResponse(index, headers={"Cache-Control": _IMMUTABLE, "ETag": f'"{digest}.index"'})


def _chunk_response(digest: str, svc: Services) -> FileResponse:
    _check(digest)
    path = svc.chunks.chunk_path(digest)
    if path is None:
        raise NotFound(f"chunk {digest} not found", loc=["path", "digest"], code="chunk_not_found")
    return FileResponse(path, media_type="application/octet-stream", headers={
        "Cache-Control": _IMMUTABLE, "ETag": f'"{digest}"', "X-Corral-Digest": digest})


_CHUNK_RESPONSES = {400: {"description": "Malformed digest"}, 404: {"description": "Unknown chunk"}}


@router.get("/chunks/{digest}", summary="Download a chunk", response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}}}, **_CHUNK_RESPONSES})
async def get_chunk(digest: str, svc: ServicesDep) -> Response:
    # Chunks are small (≤ a few MiB): one read in a worker thread beats FileResponse's
    # thread hop per 64 KiB, and this is the hot path of every lazily loaded sandbox.
    try:
        head = _chunk_response(digest, svc)
    except NotFound:
        metrics.CHUNK_REQUESTS.labels(outcome="not_found").inc()
        raise
    data = await anyio.to_thread.run_sync(Path(head.path).read_bytes)
    metrics.CHUNK_REQUESTS.labels(outcome="served").inc()
    metrics.CHUNK_BYTES.inc(len(data))
    return Response(data, media_type="application/octet-stream", headers={
        "Cache-Control": _IMMUTABLE, "ETag": f'"{digest}"', "X-Corral-Digest": digest})


# A run of chunks is one response held in memory: bounded by both.
MAX_RUN_CHUNKS = 64
MAX_RUN_BYTES = 32 * 1024 * 1024


@router.get("/indexes/{digest}/chunks", summary="Download a run of consecutive chunks of a blob", response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}},
                             "description": "chunks start .. start+count-1 of the blob's index, concatenated"},
                       400: {"description": "Malformed digest, or a run outside the index or over the bounds"},
                       404: {"description": "Unknown blob or chunk"}})
async def get_chunk_run(digest: str, svc: ServicesDep,
                        start: int = Query(ge=0, description="index of the first chunk"),
                        count: int = Query(ge=1, le=MAX_RUN_CHUNKS, description="chunks in the run")) -> Response:
    """Read-ahead of a lazily loaded layer: several chunks in one request instead of one each.
    The caller cuts the body by the index (chunk i is ``min(chunk_size, size - i*chunk_size)``
    bytes) and checks every chunk against its digest."""
    _check(digest)
    index = await blob_index(svc, digest)
    chunks = index["chunks"]
    if start >= len(chunks):
        raise BadRequest(f"start {start} is past the last chunk ({len(chunks) - 1})", loc=["query", "start"],
                         code="chunk_out_of_range")
    if start + count > len(chunks):
        raise BadRequest(f"the run ends past the last chunk ({len(chunks) - 1})", loc=["query", "count"],
                         code="chunk_out_of_range")
    if count * index["chunk_size"] > MAX_RUN_BYTES:
        raise BadRequest(f"a run is at most {MAX_RUN_BYTES} bytes", loc=["query", "count"], code="run_too_large")
    paths = [svc.chunks.chunk_path(d) for d in chunks[start:start + count]]
    if None in paths:
        metrics.CHUNK_REQUESTS.labels(outcome="not_found").inc()
        missing = chunks[start + paths.index(None)]
        raise NotFound(f"chunk {missing} not found", loc=["query", "start"], code="chunk_not_found")
    data = await anyio.to_thread.run_sync(lambda: b"".join(p.read_bytes() for p in paths))
    metrics.CHUNK_REQUESTS.labels(outcome="served").inc()
    metrics.CHUNK_BYTES.inc(len(data))
    return Response(data, media_type="application/octet-stream", headers={
        "Cache-Control": _IMMUTABLE, "ETag": f'"{digest}.{start}+{count}"'})


@router.head("/chunks/{digest}", summary="Chunk metadata", response_class=FileResponse,
             responses=_CHUNK_RESPONSES)
def head_chunk(digest: str, svc: ServicesDep) -> FileResponse:
    return _chunk_response(digest, svc)
