"""Data path of one sandbox, mounted by the app under ``/v1/sandboxes/{sandbox_id}``.

    POST /exec                 ExecRequest → ExecResult
    POST /exec/stream          ExecRequest → application/x-ndjson, one ExecChunk per line:
                               stdout/stderr pieces as produced, then one `exit` chunk
    PUT  /files?path=P&mode=M  raw body (streamed) → FileWritten {"path", "size"}; parent dirs created;
                               mode is octal text, default 644
    GET  /files/stat?path=P    FileInfo of one path (lstat: a link is not followed)
    GET  /files?path=P         a regular file → its bytes (application/octet-stream);
                               a directory → JSON list of FileInfo (lstat, links not followed)
    PUT  /network              NetworkPolicy → NetworkApplied {"network"}: the sandbox's egress rules replaced, in
                               force on return (400 for a sandbox created with network "none")
    GET  /usage                Usage: cpu, memory and disk used so far (a fresh reading)
    GET  /network              NetworkState {"counters": {tx_bytes, rx_bytes, denied}, "denied": [{at, target, reason}]}
    * /ports/{port}/{path}     HTTP ingress: the request, sent to 127.0.0.1:port inside the sandbox
                               (ports.py); its answer streamed back. 502 port_not_open when nothing
                               listens; 409 unsupported_by_backend for kinds without Capability.ports
    POST /pause, POST /resume  freeze / thaw every process (cgroup freezer via crun; QMP
                               stop/cont for VMs); running ⇄ paused in the record → StateReply {"state"}
    GET  /screen               the screen as image/png (vm backend)
    POST /input                InputRequest (keys, text, mouse) → InputSent {"sent": n} (vm backend)
    POST /commit               CommitRequest {"name", "version", "owner", "quota_bytes"} → CommitReply,
                               image-service's diff layer as it answered it (201 new, 200 the same again)
    POST /snapshot             SnapshotRequest {"snapshot_id"} → SnapshotSaved {"size_bytes"}: state
                               saved on this node
    DELETE /v1/snapshots/{id}?backend=K   remove a saved snapshot (idempotent) → 204

Every request and reply model is in ``corral_common.contracts.node`` (and ``NodeAgentClient``
in ``contracts/node_client.py`` is the one client of these routes).

Kinds that cannot do something (a container has no screen) answer 409
``unsupported_by_backend``.

Paths are absolute inside the sandbox or relative to /home/user; `..` and symlinks are
refused (400, loc ["query", "path"]). Every route requires header X-Corral-Internal-Token
when the internal_token setting is non-empty (401 otherwise).
"""

import socket
from collections.abc import AsyncIterator
from typing import Annotated, Protocol

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response, WebSocket
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.requests import HTTPConnection
from websockets.asyncio.client import connect as ws_connect

from corral_common.contracts.node import (
    HOUSEKEEPING_HEADER,
    BalloonState,
    BalloonTarget,
    CommitReply,
    CommitRequest,
    ExecChunk,
    ExecRequest,
    ExecResult,
    FileInfo,
    FileWritten,
    InputRequest,
    InputSent,
    NetworkApplied,
    NetworkPolicy,
    NetworkState,
    SandboxActivity,
    SnapshotRequest,
    SnapshotSaved,
    StateReply,
    Usage,
)
from corral_common.contracts.sandboxes import SandboxState
from corral_common.web.errors import BadRequest
from corral_common.web.internal import require_internal_token
from corral_common.web.ws_relay import relay
from corral_node_agent import ports
from corral_node_agent.errors import NodeAgentError

from .service import SandboxManager


class PauseControl(Protocol):
    """Pause and resume go through the node's control loop (``events.service.NodeEvents``), which
    keeps the record in step: this router takes it by this shape, not by importing the loop
    (which imports this package)."""

    async def pause(self, sandbox_id: str) -> SandboxState: ...

    async def resume(self, sandbox_id: str) -> SandboxState: ...


# The app's services (corral_node_agent.container.Services, which imports this package: read by
# attribute, not imported).
async def get_manager(request: HTTPConnection) -> SandboxManager:
    return request.app.state.services.manager


async def get_control(request: HTTPConnection) -> PauseControl:
    return request.app.state.services.events



Manager = Annotated[SandboxManager, Depends(get_manager)]
Control = Annotated[PauseControl, Depends(get_control)]

# An internal caller's own maintenance in a sandbox (the memory-manager's in-guest cache drop):
# not counted as use, or it would make the idle sandbox it works on look busy (activity.py).
HousekeepingHeader = Annotated[bool | None, Header(alias=HOUSEKEEPING_HEADER)]

router = APIRouter(prefix="/v1/sandboxes/{sandbox_id}", tags=["sandbox data path"],
                   dependencies=[Depends(require_internal_token)])


@router.post("/pause", summary="Freeze the sandbox (running → paused)")
async def pause(sandbox_id: str, control: Control) -> StateReply:
    return StateReply(state=await control.pause(sandbox_id))


@router.put("/network", summary="Replace the sandbox's egress rules (in force on return)")
async def set_network(sandbox_id: str, body: NetworkPolicy, manager: Manager) -> NetworkApplied:
    await manager.set_network(sandbox_id, body)
    return NetworkApplied(network=body)


@router.get("/usage", summary="Resources the sandbox has used so far (a fresh reading)")
async def get_usage(sandbox_id: str, manager: Manager) -> Usage:
    return manager.usage(sandbox_id)


@router.get("/network", summary="The sandbox's egress counters and latest refusals")
async def get_network(sandbox_id: str, manager: Manager) -> NetworkState:
    return NetworkState.model_validate(await manager.network_state(sandbox_id))


@router.get("/balloon", summary="A VM's balloon and its guest's memory stats (the memory-manager's lever)")
async def get_balloon(sandbox_id: str, manager: Manager) -> BalloonState:
    return await manager.balloon(sandbox_id)


@router.put("/balloon", summary="Set a VM's balloon: the RAM to leave its guest")
async def set_balloon(sandbox_id: str, body: BalloonTarget, manager: Manager) -> BalloonTarget:
    await manager.set_balloon(sandbox_id, body.target_mb)
    return body


@router.post("/resume", summary="Thaw the sandbox (paused → running)")
async def resume(sandbox_id: str, control: Control) -> StateReply:
    return StateReply(state=await control.resume(sandbox_id))


@router.get("/screen", summary="The screen as a PNG", response_class=Response,
            responses={200: {"content": {"image/png": {}}}})
async def screen(sandbox_id: str, manager: Manager) -> Response:
    return Response(await manager.screenshot(sandbox_id), media_type="image/png")


@router.post("/input", summary="Send key presses, text and mouse events, in order")
async def send_input(sandbox_id: str, body: InputRequest, manager: Manager) -> InputSent:
    await manager.send_input(sandbox_id, body.events)
    return InputSent(sent=len(body.events))


@router.post("/snapshot", summary="Save the sandbox's state on this node (it keeps running)")
async def snapshot(sandbox_id: str, body: SnapshotRequest, manager: Manager) -> SnapshotSaved:
    return SnapshotSaved(size_bytes=await manager.snapshot(sandbox_id, body.snapshot_id))


@router.post("/commit", summary="The writable layer as a new diff layer in image-service (it keeps running)",
             response_model=CommitReply,
             responses={201: {"model": CommitReply, "description": "A new layer (200: the same content again)"}})
async def commit(sandbox_id: str, body: CommitRequest, manager: Manager) -> JSONResponse:
    # image-service's layer passed on, with its status (201 or 200).
    layer, status = await manager.commit(sandbox_id, body)
    return JSONResponse(layer.model_dump(mode="json"), status_code=status)


@router.post("/exec", response_model=ExecResult, summary="Run a command and wait for it")
async def exec_command(sandbox_id: str, req: ExecRequest, manager: Manager,
                       housekeeping: HousekeepingHeader = None) -> ExecResult:
    return await manager.exec(sandbox_id, req, counted=not housekeeping)


@router.post("/exec/stream", summary="Run a command, streaming output as JSON lines",
             response_class=StreamingResponse,
             responses={200: {"content": {"application/x-ndjson": {}},
                              "description": "One ExecChunk per line; the last has type=exit"}})
async def exec_stream(sandbox_id: str, req: ExecRequest, manager: Manager,
                      housekeeping: HousekeepingHeader = None) -> StreamingResponse:
    chunks = manager.exec_stream(sandbox_id, req, counted=not housekeeping)
    # Pull the first chunk here so an unknown sandbox is a 404, not a broken 200 stream.
    first = await anext(chunks)

    async def lines() -> AsyncIterator[bytes]:
        try:
            yield _line(first)
            async for chunk in chunks:
                yield _line(chunk)
        finally:
            await chunks.aclose()

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.api_route("/ports/{port}/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
                  summary="HTTP ingress to a port inside the sandbox", include_in_schema=False)
async def port_ingress(sandbox_id: str, port: Annotated[int, Path(ge=1, le=65535)], path: str, request: Request,
                       manager: Manager) -> Response:
    async def connect(target: int) -> socket.socket:
        return await manager.connect_port(sandbox_id, target)

    return await ports.forward(connect, port, path, request)


@router.websocket("/ports/{port}/{path:path}")
async def port_ingress_ws(websocket: WebSocket, sandbox_id: str, port: Annotated[int, Path(ge=1, le=65535)],
                          path: str, manager: Manager) -> None:
    """WebSocket ingress: the handshake is made to the sandbox's port over a connection made
    inside the sandbox, then messages are relayed both ways."""
    try:
        sock = await manager.connect_port(sandbox_id, port)
    except NodeAgentError as exc:
        await websocket.close(code=1011, reason=exc.message[:120])
        return
    target = f"ws://localhost:{port}/{path}" + (f"?{websocket.url.query}" if websocket.url.query else "")
    protocols = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    try:
        upstream = await ws_connect(target, sock=sock, subprotocols=protocols or None, proxy=None, compression=None)
    except Exception as exc:  # noqa: BLE001 - the sandbox's server refused the handshake
        sock.close()
        await websocket.close(code=1011, reason=f"handshake with port {port} failed: {exc}"[:120])
        return
    await websocket.accept(subprotocol=upstream.subprotocol)
    await relay(websocket, upstream)


def _line(chunk: ExecChunk) -> bytes:
    """One NDJSON line. An output chunk leaves out the fields it has not (``result``); the
    exit chunk's result is whole, as ``POST /exec`` answers it: a timed-out run's
    ``"exit_code": null`` (with ``"timed_out": true``) is sent, not dropped."""
    return chunk.model_dump_json(exclude={name for name, value in chunk if value is None}).encode() + b"\n"


def _parse_mode(mode: str) -> int:
    try:
        value = int(mode, 8)
    except ValueError:
        raise BadRequest("mode must be octal, e.g. 644", loc=["query", "mode"]) from None
    if not 0 <= value <= 0o777:
        raise BadRequest("mode must be between 000 and 777", loc=["query", "mode"])
    return value


@router.put("/files", summary="Upload a file (raw body)")
async def put_file(sandbox_id: str, request: Request, manager: Manager,
                   path: str = Query(..., max_length=4096), mode: str = Query("644", max_length=4)) -> FileWritten:
    size = await manager.write_file(sandbox_id, path, request.stream(), _parse_mode(mode))
    return FileWritten(path=path, size=size)


@router.get("/files/stat", summary="Stat one path (a symlink is not followed)")
async def stat_file(sandbox_id: str, manager: Manager, path: str = Query(..., max_length=4096)) -> FileInfo:
    return await manager.stat(sandbox_id, path)


@router.get("/files", summary="Download a file, or list a directory",
            responses={200: {"content": {"application/octet-stream": {},
                                         "application/json": {"schema": {"type": "array", "items": {
                                             "$ref": "#/components/schemas/FileInfo"}}}}}})
async def get_file(sandbox_id: str, manager: Manager, path: str = Query(..., max_length=4096)):
    info = await manager.stat(sandbox_id, path)
    if info.type == "dir":
        entries: list[FileInfo] = await manager.list_dir(sandbox_id, path)
        return JSONResponse([e.model_dump(mode="json") for e in entries])
    # No Content-Length: sandbox code may grow or shrink the file while it streams.
    _size, chunks = await manager.open_file(sandbox_id, path)
    return StreamingResponse(chunks, media_type="application/octet-stream")


snapshots_router = APIRouter(prefix="/v1/snapshots", tags=["snapshots"], dependencies=[Depends(require_internal_token)])


@snapshots_router.delete("/{snapshot_id}", status_code=204, summary="Remove a saved snapshot (idempotent)")
async def delete_snapshot(snapshot_id: str, manager: Manager,
                          backend: str | None = Query(None, max_length=16)) -> Response:
    await manager.delete_snapshot(snapshot_id, backend)
    return Response(status_code=204)


activity_router = APIRouter(prefix="/v1/activity", tags=["sandbox data path"],
                            dependencies=[Depends(require_internal_token)])


@activity_router.get("", summary="Each sandbox's data-path use: calls in flight, seconds since the last ended")
async def activity(manager: Manager) -> list[SandboxActivity]:
    return manager.activity_snapshot()
