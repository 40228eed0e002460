"""Public sandbox endpoints: lifecycle (control path over the bus) and exec/files (data path)."""

from collections.abc import AsyncIterator
from typing import Annotated

import httpx
from fastapi import APIRouter, Depends, Path, Query, Request, Response, WebSocket
from fastapi.responses import StreamingResponse

from corral_api.auth.dependencies import Tenant
from corral_api.body_limits import body_limit
from corral_api.limits import api_key_of
from corral_api.sandboxes.data_path import INGRESS_RESPONSE_DROPPED, SandboxDataPath
from corral_api.sandboxes.schemas import Sandbox, SandboxCreate, SandboxList, SandboxNetworkState, WaitState
from corral_api.sandboxes.service import SandboxService
from corral_api.snapshots.schemas import Snapshot
from corral_api.snapshots.service import SnapshotService, to_schema
from corral_common.display import InputRequest
from corral_common.errors import ERROR_RESPONSES, BadRequest, CorralError, ErrorResponse
from corral_common.exec import ExecRequest, ExecResult, FileInfo
from corral_common.inputs import ID_PATTERN
from corral_common.network import NetworkPolicy
from corral_common.sandboxes import TERMINAL_STATES, SandboxState, Usage
from corral_common.ws_relay import relay

router = APIRouter(prefix="/v1/sandboxes", tags=["sandboxes"], responses=ERROR_RESPONSES)

WaitFor = Annotated[WaitState | None, Query(description="Block until the sandbox reaches this state (or fails)")]
WaitTimeout = Annotated[float, Query(gt=0, le=3600, description="Longest wait in seconds")]
FilePath = Annotated[str, Query(min_length=1, max_length=4096, description="Absolute, or relative to the home dir")]


async def sandboxes(request: Request) -> SandboxService:
    return request.app.state.sandboxes


async def data_path(request: Request) -> SandboxDataPath:
    return request.app.state.data_path


async def snapshots(request: Request) -> SnapshotService:
    return request.app.state.snapshots


Service = Annotated[SandboxService, Depends(sandboxes)]
Data = Annotated[SandboxDataPath, Depends(data_path)]
Snapshots = Annotated[SnapshotService, Depends(snapshots)]


def parse_labels(selectors: list[str]) -> dict[str, str]:
    labels = {}
    for selector in selectors:
        key, sep, value = selector.partition("=")
        if not sep or not key:
            raise BadRequest(f"label selector {selector!r} must be key=value", loc=["query", "label"])
        labels[key] = value
    return labels


@router.post("", status_code=202, response_model=Sandbox, operation_id="create_sandbox")
async def create_sandbox(body: SandboxCreate, tenant: Tenant, service: Service, response: Response,
                         wait_for: WaitFor = None, timeout: WaitTimeout = 60.0) -> Sandbox:
    """Ask for a sandbox. Answers 202 at once, or after it reaches ``wait_for``."""
    record = await service.create(tenant, body)
    if wait_for:
        record = await service.wait(tenant, record.id, SandboxState(wait_for), timeout)
    response.headers["Location"] = f"/v1/sandboxes/{record.id}"
    return Sandbox.from_record(record)


@router.get("", response_model=SandboxList, operation_id="list_sandboxes")
async def list_sandboxes(tenant: Tenant, service: Service,
                         label: Annotated[list[str], Query(description="key=value; repeat to AND")] = [],
                         state: SandboxState | None = None,
                         limit: Annotated[int | None, Query(ge=1, le=10_000, description=(
                             "At most this many, in id order (then next_after says where the next page starts); "
                             "unset: all of them"))] = None,
                         after: Annotated[str | None, Query(pattern=ID_PATTERN, description=(
                             "Start after this sandbox id (a page's next_after)"))] = None) -> SandboxList:
    if limit is None:
        if after is not None:
            raise BadRequest("after= pages through a listing: give limit= too", loc=["query", "after"])
        records = await service.list(tenant, parse_labels(label), state)
        return SandboxList(items=[Sandbox.from_record(r) for r in records])
    records, next_after = await service.list_page(tenant, parse_labels(label), state, limit=limit, after=after)
    return SandboxList(items=[Sandbox.from_record(r) for r in records], next_after=next_after)


@router.delete("", status_code=202, response_model=SandboxList, operation_id="delete_sandboxes")
async def delete_sandboxes(tenant: Tenant, service: Service,
                           label: Annotated[list[str], Query(description="key=value; repeat to AND; required")] = [],
                           ) -> SandboxList:
    """Delete every live sandbox whose labels match all selectors (e.g. ``job=<id>``)."""
    labels = parse_labels(label)
    if not labels:
        raise BadRequest("give at least one label selector (deleting everything is not offered)",
                         loc=["query", "label"])
    records = await service.list(tenant, labels, None)
    deleted = []
    for record in records:
        if record.state not in TERMINAL_STATES:
            deleted.append(await service.delete(tenant, record.id))
    return SandboxList(items=[Sandbox.from_record(r) for r in deleted])


@router.get("/{sandbox_id}", response_model=Sandbox, operation_id="get_sandbox")
async def get_sandbox(sandbox_id: str, tenant: Tenant, service: Service, wait_for: WaitFor = None,
                      timeout: WaitTimeout = 60.0) -> Sandbox:
    if wait_for:
        return Sandbox.from_record(await service.wait(tenant, sandbox_id, SandboxState(wait_for), timeout))
    return Sandbox.from_record(await service.get(tenant, sandbox_id))


@router.delete("/{sandbox_id}", status_code=202, response_model=Sandbox, operation_id="delete_sandbox")
async def delete_sandbox(sandbox_id: str, tenant: Tenant, service: Service,
                         wait: Annotated[bool, Query(description="Block until it is terminated")] = False,
                         timeout: WaitTimeout = 60.0) -> Sandbox:
    record = await service.delete(tenant, sandbox_id)
    if wait:
        record = await service.wait(tenant, sandbox_id, SandboxState.terminated, timeout)
    return Sandbox.from_record(record)


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


@router.post("/{sandbox_id}/snapshot", status_code=201, response_model=Snapshot, operation_id="snapshot_sandbox")
async def snapshot_sandbox(sandbox_id: str, tenant: Tenant, snapshots: Snapshots, response: Response) -> Snapshot:
    """Save a running VM's memory and disk on its node's disk (it keeps running). Create a
    sandbox with ``from_snapshot`` to restore it. Containers answer 409 ``unsupported_by_backend``."""
    row = await snapshots.create(tenant, sandbox_id)
    response.headers["Location"] = f"/v1/snapshots/{row.id}"
    return to_schema(row)


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
                          path: str) -> None:
    """WebSocket ingress (same rules as HTTP): the API key is the handshake's ``Authorization:
    Bearer`` or ``X-API-Key``; a refusal closes the socket with 1008 (auth) or 1011."""
    key = api_key_of(websocket.headers)
    principal = await websocket.app.state.api_keys.authenticate(key) if key else None
    tenant = principal.tenant if principal else None
    if tenant is None:
        await websocket.close(code=1008, reason="missing or invalid API key")
        return
    protocols = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    try:
        upstream = await websocket.app.state.data_path.port_websocket(tenant, sandbox_id, port, path,
                                                                       websocket.url.query, protocols)
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
