"""Public sandbox endpoints that a sandbox's node answers (its data path): pause/resume, egress
rules and counters, usage, screen and input, exec, files, and HTTP/WebSocket ingress to its ports.
Each finds the sandbox's node (tenant-checked) and forwards through ``SandboxDataPath``."""

from collections.abc import AsyncIterator
from typing import Annotated

import httpx
from fastapi import APIRouter, Depends, Path, Query, Request, Response, WebSocket
from fastapi.responses import StreamingResponse

from corral_api.auth.dependencies import Tenant
from corral_api.auth.service import ApiKeyService
from corral_api.body_limits import body_limit
from corral_api.dataplane.schemas import SandboxNetworkState
from corral_api.dataplane.service import INGRESS_RESPONSE_DROPPED, SandboxDataPath
from corral_api.deps import provide
from corral_api.limits import api_key_of
from corral_api.sandboxes.schemas import Sandbox
from corral_common.contracts.display import InputRequest
from corral_common.contracts.exec import ExecRequest, ExecResult, FileInfo
from corral_common.contracts.network import NetworkPolicy
from corral_common.contracts.sandboxes import Usage
from corral_common.web.errors import ERROR_RESPONSES, CorralError, ErrorResponse
from corral_common.web.ws_relay import relay

# Paths under the sandboxes' prefix and tag: the public API is the same as when these lived in
# corral_api.sandboxes.router.
router = APIRouter(prefix="/v1/sandboxes", tags=["sandboxes"], responses=ERROR_RESPONSES)

FilePath = Annotated[str, Query(min_length=1, max_length=4096, description="Absolute, or relative to the home dir")]
Data = Annotated[SandboxDataPath, Depends(provide(SandboxDataPath))]
Keys = Annotated[ApiKeyService, Depends(provide(ApiKeyService))]


@router.post("/{sandbox_id}/pause", response_model=Sandbox, operation_id="pause_sandbox")
async def pause_sandbox(sandbox_id: str, tenant: Tenant, data: Data) -> Sandbox:
    """Freeze every process of a running sandbox (cgroup freezer); memory and files stay.
    Data-path calls answer 409 until it is resumed. Its ``timeout_s`` keeps counting."""
    return Sandbox.from_record(await data.pause(tenant, sandbox_id))


@router.patch("/{sandbox_id}/network", response_model=Sandbox, operation_id="set_sandbox_network")
async def set_sandbox_network(sandbox_id: str, body: NetworkPolicy, tenant: Tenant, data: Data) -> Sandbox:
    """Replace a running sandbox's egress allowlist; the new rules hold for every connection
    and DNS query from the moment this returns (open connections stay). A sandbox created with
    ``network: "none"`` has no interface: 409 ``network_none``. Rules are judged as at create (422)."""
    return Sandbox.from_record(await data.set_network(tenant, sandbox_id, body))


@router.get("/{sandbox_id}/network", response_model=SandboxNetworkState, operation_id="get_sandbox_network")
async def get_sandbox_network(sandbox_id: str, tenant: Tenant, data: Data) -> SandboxNetworkState:
    """The sandbox's egress policy, its byte and refusal counters, and its latest refusals
    (what its rules kept it from: ``target`` and ``reason``)."""
    return SandboxNetworkState.model_validate(await data.network_state(tenant, sandbox_id))


@router.get("/{sandbox_id}/usage", response_model=Usage, operation_id="get_sandbox_usage")
async def get_sandbox_usage(sandbox_id: str, tenant: Tenant, data: Data) -> Usage:
    """What a running (or paused) sandbox has used so far, read on its node now: cpu seconds,
    memory (peak, working set, memory·time), bytes on its disk, network. An ended sandbox's
    totals are in its record (``usage``)."""
    return await data.usage(tenant, sandbox_id)


@router.post("/{sandbox_id}/resume", response_model=Sandbox, operation_id="resume_sandbox")
async def resume_sandbox(sandbox_id: str, tenant: Tenant, data: Data) -> Sandbox:
    """Thaw a paused sandbox (running again)."""
    return Sandbox.from_record(await data.resume(tenant, sandbox_id))


@router.get("/{sandbox_id}/screen", operation_id="get_screen", response_class=Response,
            responses={200: {"content": {"image/png": {"schema": {"type": "string", "format": "binary"}}},
                             "description": "A PNG screenshot"}})
async def get_screen(sandbox_id: str, tenant: Tenant, data: Data) -> Response:
    """The screen of a ``vm`` sandbox as a PNG. Other kinds answer 409 ``unsupported_by_backend``."""
    return Response(await data.screenshot(tenant, sandbox_id), media_type="image/png")


@router.post("/{sandbox_id}/input", operation_id="send_input")
async def send_input(sandbox_id: str, body: InputRequest, tenant: Tenant, data: Data) -> dict[str, int]:
    """Send key presses, text and mouse moves/clicks to a ``vm`` sandbox, in order → ``{"sent": n}``."""
    return {"sent": await data.send_input(tenant, sandbox_id, body)}


@router.post("/{sandbox_id}/exec", response_model=ExecResult, operation_id="exec_command")
async def exec_command(sandbox_id: str, body: ExecRequest, tenant: Tenant, data: Data) -> ExecResult:
    """Run a command and wait for it. Output is capped per stream (``truncated``)."""
    return await data.exec(tenant, sandbox_id, body)


@router.post("/{sandbox_id}/exec/stream", operation_id="exec_command_stream",
             responses={200: {"content": {"application/x-ndjson": {}},
                              "description": "JSON lines: {type: stdout|stderr, data} ..., then {type: exit, result}"}})
async def exec_command_stream(sandbox_id: str, body: ExecRequest, tenant: Tenant, data: Data) -> StreamingResponse:
    return StreamingResponse(await data.exec_stream(tenant, sandbox_id, body), media_type="application/x-ndjson")


@router.api_route("/{sandbox_id}/ports/{port}/{path:path}", include_in_schema=False,
                  methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
                  openapi_extra=body_limit("max_upload_mb"))
async def port_ingress(sandbox_id: str, port: Annotated[int, Path(ge=1, le=65535)], path: str, request: Request,
                       tenant: Tenant, data: Data) -> StreamingResponse:
    """HTTP ingress: the request goes to ``port`` on the sandbox's own loopback (a web app, a
    Jupyter server, an action server inside the image) and its answer streams back. The
    sandbox keeps no network: its node-agent connects inside it. Corral's credentials are not
    passed on. 502 ``port_not_open`` when nothing listens there."""
    return ingress_response(*await data.port_request(tenant, sandbox_id, port, path, request))


@router.websocket("/{sandbox_id}/ports/{port}/{path:path}")
async def port_ingress_ws(websocket: WebSocket, sandbox_id: str, port: Annotated[int, Path(ge=1, le=65535)],
                          path: str, keys: Keys, data: Data) -> None:
    """WebSocket ingress (same rules as HTTP): the API key is the handshake's ``Authorization:
    Bearer`` or ``X-API-Key``; a refusal closes the socket with 1008 (auth) or 1011."""
    key = api_key_of(websocket.headers)
    principal = await keys.authenticate(key) if key else None
    tenant = principal.tenant if principal else None
    if tenant is None:
        await websocket.close(code=1008, reason="missing or invalid API key")
        return
    protocols = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    try:
        upstream = await data.port_websocket(tenant, sandbox_id, port, path, websocket.url.query, protocols)
    except CorralError as exc:
        await websocket.close(code=1008 if exc.status_code == 404 else 1011, reason=exc.message[:120])
        return
    await websocket.accept(subprotocol=upstream.subprotocol)
    await relay(websocket, upstream)


def ingress_response(upstream: httpx.Response, body: AsyncIterator[bytes]) -> StreamingResponse:
    response = StreamingResponse(body, status_code=upstream.status_code)
    response.raw_headers = [(k.lower(), v) for k, v in upstream.headers.raw
                            if k.decode("latin-1").lower() not in INGRESS_RESPONSE_DROPPED]
    return response


@router.put("/{sandbox_id}/files", status_code=204, operation_id="write_file",
            responses={507: {"model": ErrorResponse,
                             "description": "The sandbox's disk (disk_mb) is full: code disk_full, no file is left"}},
            openapi_extra=body_limit("max_upload_mb", {"requestBody": {
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
                "required": True}}))
async def write_file(sandbox_id: str, path: FilePath, request: Request, tenant: Tenant, data: Data,
                     mode: Annotated[int, Query(ge=0, le=0o777)] = 0o644) -> Response:
    """Upload a file (raw body). Parent directories are created."""
    await data.write_file(tenant, sandbox_id, path, request.stream(), mode)
    return Response(status_code=204)


@router.get("/{sandbox_id}/files", operation_id="read_file",
            responses={200: {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
async def read_file(sandbox_id: str, path: FilePath, tenant: Tenant, data: Data) -> StreamingResponse:
    """Download a file's bytes."""
    return StreamingResponse(await data.open_file(tenant, sandbox_id, path), media_type="application/octet-stream")


@router.get("/{sandbox_id}/files/list", response_model=list[FileInfo], operation_id="list_files")
async def list_files(sandbox_id: str, path: FilePath, tenant: Tenant, data: Data) -> list[FileInfo]:
    """List a directory (entries are not followed through symlinks)."""
    return await data.list_files(tenant, sandbox_id, path)
