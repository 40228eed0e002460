"""Streamed request bodies: spooled to the blob store's tmp dir, never held in memory."""

from pathlib import Path

import anyio
from fastapi import Request
from starlette.requests import ClientDisconnect

from corral_common.web.errors import BadRequest, PayloadTooLarge
from corral_image_service import metrics
from corral_image_service.blobs.service import BlobStore

_UPLOAD_KINDS = {".tar": "layer", ".image.tar": "oci_image"}


async def spool_body(request: Request, store: BlobStore, *, limit_bytes: int, limit_setting: str,
                     suffix: str, empty_hint: str) -> Path:
    """Stream the request body to a temp file, enforcing ``limit_bytes`` as it goes (413)."""
    too_large = PayloadTooLarge(f"upload exceeds {limit_setting}={limit_bytes // (1024 * 1024)}",
                                loc=["body"], extra={"limit_bytes": limit_bytes})
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit_bytes:
        raise too_large
    tmp = store.tmp_file(suffix=suffix)
    size = 0
    try:
        async with await anyio.open_file(tmp, "wb") as f:
            async for chunk in request.stream():
                size += len(chunk)
                # Checked per chunk: chunked uploads carry no Content-Length to trust.
                if size > limit_bytes:
                    raise too_large
                await f.write(chunk)
    except ClientDisconnect as exc:
        tmp.unlink(missing_ok=True)
        # Nobody will read the response; a 400 just keeps a traceback out of the logs.
        raise BadRequest("client disconnected during upload", loc=["body"], code="client_disconnected") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if size == 0:
        tmp.unlink(missing_ok=True)
        raise BadRequest(f"empty body: {empty_hint}", loc=["body"], code="empty_body")
    kind = _UPLOAD_KINDS.get(suffix, "disk_image")  # a disk image's suffix is its format (.qcow2, .raw...)
    metrics.UPLOADS.labels(kind=kind).inc()
    metrics.UPLOAD_BYTES.labels(kind=kind).inc(size)
    return tmp
