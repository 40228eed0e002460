"""envd's HTTP surface on the api's own port: ``/health``, ``/files`` and the Connect-RPC
routes ``/process.Process/*`` and ``/filesystem.Filesystem/*``. The SDK sends ``E2b-Sandbox-Id``
(and ``E2b-Sandbox-Port: 49983``) on each, as E2B's edge proxy expects; none of these paths
clash with Corral's own (``/v1/...``), so no routing middleware is needed."""

import posixpath
import zlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, WebSocket
from fastapi.responses import JSONResponse, StreamingResponse

from corral_api.body_limits import body_limit, capped
from corral_api.compat.e2b import connect
from corral_api.compat.e2b.connect import ConnectError
from corral_api.compat.e2b.envd import (
    FILESYSTEM_UNARY,
    PROCESS_STREAMS,
    PROCESS_UNARY,
    Envd,
    EnvdServices,
    resolve,
)
from corral_api.compat.e2b.errors import E2bError, E2bRoute
from corral_api.compat.e2b.ingress import PREFIX
from corral_api.compat.e2b.processes import UNLIMITED_S, ProcessTable
from corral_api.dataplane.router import ingress_response
from corral_api.dataplane.service import SandboxDataPath
from corral_api.deps import service_of
from corral_api.limits import WS_TRY_AGAIN_LATER
from corral_api.multipart import multipart_parts
from corral_api.settings import ApiSettings
from corral_common.web.errors import CorralError, NotFound, TooManyRequests
from corral_common.web.ws_relay import relay

router = APIRouter(route_class=E2bRoute, include_in_schema=False, tags=["e2b envd"])

FilePath = Annotated[str | None, Query(max_length=4096)]
Username = Annotated[str | None, Query(max_length=64)]


def _services(request: Request) -> EnvdServices:
    return EnvdServices(service_of(request, SandboxDataPath), service_of(request, ProcessTable))


@router.get("/health", status_code=204)
async def health(request: Request) -> Response:
    await resolve(request)
    return Response(status_code=204)


def _file_error(exc: CorralError) -> E2bError:
    return E2bError(exc.status_code if exc.status_code in (400, 401, 404, 429, 507) else
                    (404 if exc.status_code == 409 and exc.code != "sandbox_not_running" else
                     502 if exc.code == "sandbox_not_running" else exc.status_code), exc.message)


@router.get("/files")
async def download(request: Request, path: FilePath = None, username: Username = None) -> Response:
    call = await resolve(request, username)
    target = call.path(path or "")
    data = service_of(request, SandboxDataPath)
    try:
        info = await data.stat(call.tenant, call.sandbox_id, target)
        if info.type != "file":
            raise E2bError(400, f"path {target} is not a file")
        chunks = await data.open_file(call.tenant, call.sandbox_id, target)
    except NotFound:
        raise E2bError(404, f"path {target} does not exist") from None
    except CorralError as exc:
        raise _file_error(exc) from None
    return StreamingResponse(chunks, media_type="application/octet-stream")


async def _gunzip(stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        async for chunk in stream:
            out = inflater.decompress(chunk)
            if out:
                yield out
        tail = inflater.flush()
    except zlib.error:
        raise E2bError(400, "body is not valid gzip") from None
    if tail:
        yield tail


@router.post("/files", openapi_extra=body_limit("max_upload_mb"))
async def upload(request: Request, path: FilePath = None, username: Username = None) -> JSONResponse:
    """multipart (field ``file``; ``path`` names the one file of a single-file write, each
    part's filename its target path in a multi-file write) or a raw octet-stream body
    (possibly gzip). Each file streams into the sandbox as it arrives (nothing of it is kept
    in the api); the body is bounded by max_upload_mb (body_limits), its unpacked gzip too."""
    call = await resolve(request, username)
    written = []
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        async for part in multipart_parts(request.stream(), content_type):
            if part.filename is None:
                continue  # a form field: envd has none
            if path and written:
                raise E2bError(400, "path: names the one file of a single-file write; a multi-file write names "
                                    "each file by its part's filename")
            target = call.path(path or part.filename)
            await _write(request, call, target, part.content)
            written.append(target)
        if not written:
            raise E2bError(400, "multipart body has no file part")
    else:
        if not path:
            raise E2bError(400, "path: required for a raw (octet-stream) upload")
        body: AsyncIterator[bytes] = request.stream()
        if request.headers.get("content-encoding", "").lower() == "gzip":
            body = capped(_gunzip(body), service_of(request, ApiSettings).max_upload_mb * 1024 * 1024)
        target = call.path(path)
        await _write(request, call, target, body)
        written.append(target)
    return JSONResponse([{"name": posixpath.basename(p), "type": "file", "path": p} for p in written])


async def _write(request: Request, call: Envd, target: str, content: Any) -> None:
    try:
        await service_of(request, SandboxDataPath).write_file(call.tenant, call.sandbox_id, target, content)
    except CorralError as exc:
        raise _file_error(exc) from None


@router.api_route(PREFIX + "/{port}/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
                  openapi_extra=body_limit("max_upload_mb"))
async def port_ingress(port: str, path: str, request: Request) -> StreamingResponse:
    """A sandbox port through E2B's header routing (ingress.py)."""
    call = await resolve(request, allow_traffic=True)
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise E2bError(400, f"E2b-Sandbox-Port: {port!r} is not a port")
    return ingress_response(*await service_of(request, SandboxDataPath).port_request(call.tenant, call.sandbox_id, int(port),
                                                                             path, request))


@router.websocket(PREFIX + "/{port}/{path:path}")
async def port_ingress_ws(websocket: WebSocket, port: str, path: str) -> None:
    """A sandbox port's WebSocket through E2B's header routing (ingress.py)."""
    try:
        call = await resolve(websocket, allow_traffic=True)
    except E2bError as exc:
        await websocket.close(code=1008, reason=exc.message[:120])
        return
    except TooManyRequests as exc:
        await websocket.close(code=WS_TRY_AGAIN_LATER, reason=exc.message[:120])
        return
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        await websocket.close(code=1008, reason=f"E2b-Sandbox-Port: {port!r} is not a port")
        return
    protocols = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    try:
        upstream = await service_of(websocket, SandboxDataPath).port_websocket(call.tenant, call.sandbox_id, int(port), path,
                                                                       websocket.url.query, protocols)
    except CorralError as exc:
        await websocket.close(code=1011, reason=exc.message[:120])
        return
    await websocket.accept(subprotocol=upstream.subprotocol)
    await relay(websocket, upstream)


# ---- Connect RPC -------------------------------------------------------------------------------


def _unary_error(exc: ConnectError) -> JSONResponse:
    return JSONResponse(exc.to_json(), status_code=connect.HTTP_STATUS[exc.code])


async def _unary(request: Request, method: str) -> Response:
    call = await resolve(request)
    try:
        message = connect.parse_json(await request.body())
        result = await getattr(_services(request), method)(call, message)
    except ConnectError as exc:
        return _unary_error(exc)
    return JSONResponse(result)


async def _server_stream(request: Request, method: str) -> Response:
    call = await resolve(request)
    try:
        message = connect.parse_stream_request(await request.body())
        timeout_s = connect.timeout_s(request.headers, UNLIMITED_S)
        messages = await getattr(_services(request), method)(call, message, timeout_s)
    except ConnectError as exc:
        # Errors of a stream travel in its end-of-stream message, with HTTP 200.
        return Response(connect.end_of_stream(exc), media_type=connect.STREAM_CONTENT_TYPE)

    async def body() -> AsyncIterator[bytes]:
        try:
            async for item in messages:
                yield connect.envelope(item)
        except ConnectError as exc:
            yield connect.end_of_stream(exc)
            return
        finally:
            await messages.aclose()
        yield connect.end_of_stream()

    return StreamingResponse(body(), media_type=connect.STREAM_CONTENT_TYPE)


@router.post("/process.Process/{rpc}")
async def process_rpc(rpc: str, request: Request) -> Response:
    if rpc in PROCESS_STREAMS:
        return await _server_stream(request, PROCESS_STREAMS[rpc])
    if rpc in PROCESS_UNARY:
        return await _unary(request, PROCESS_UNARY[rpc])
    await resolve(request)
    return _unary_error(ConnectError("unimplemented", f"process.Process/{rpc} is not implemented"))


@router.post("/filesystem.Filesystem/{rpc}")
async def filesystem_rpc(rpc: str, request: Request) -> Response:
    if rpc in FILESYSTEM_UNARY:
        return await _unary(request, FILESYSTEM_UNARY[rpc])
    await resolve(request)
    return _unary_error(ConnectError("unimplemented", f"filesystem.Filesystem/{rpc} is not implemented"))
