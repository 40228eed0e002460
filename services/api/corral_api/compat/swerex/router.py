"""SWE-ReX's remote-runtime routes per sandbox, under ``/v1/sandboxes/{sandbox_id}/swerex``
(``RemoteRuntime(host=<that URL>, port=None, auth_token=<token>)``), and the public route
that issues a runtime's token.

The runtime routes are SWE-ReX's protocol, not Corral's API: they stay out of the OpenAPI
document (and so out of the generated SDK). Auth is the per-sandbox token in X-API-Key.
"""

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import TypeAdapter

from corral_api.auth.dependencies import Tenant
from corral_api.body_limits import body_limit
from corral_api.compat.swerex.schemas import (
    Action,
    BashAction,
    CloseBashSessionRequest,
    Command,
    CreateBashSessionRequest,
    IsAliveResponse,
    ReadFileRequest,
    SwerexToken,
    WriteFileRequest,
)
from corral_api.compat.swerex.service import SwerexError, SwerexService
from corral_api.deps import provide
from corral_api.limits import claim_tenant_slot
from corral_api.multipart import multipart_parts
from corral_api.rollouts.models import RolloutRow
from corral_common.inputs import storable_text
from corral_common.web.errors import ERROR_RESPONSES, BadRequest, Unprocessable

PREFIX = "/v1/sandboxes/{sandbox_id}/swerex"
_ACTION = TypeAdapter(Action)


Service = Annotated[SwerexService, Depends(provide(SwerexService))]


async def runtime(sandbox_id: str, service: Service, request: Request,
                  x_api_key: Annotated[str | None, Header()] = None) -> RolloutRow:
    row = await service.authenticate(sandbox_id, x_api_key)
    claim_tenant_slot(request, row.tenant)  # the runtime's token, not an API key, named the tenant
    return row


Runtime = Annotated[RolloutRow, Depends(runtime)]


def request_key(x_request_id: Annotated[str | None, Header(max_length=128)] = None) -> str:
    """The step key: the client's X-Request-ID (a retry repeats it); a request without one is
    logged under a fresh key."""
    if x_request_id is None:
        return f"corral-{uuid.uuid4()}"
    try:
        storable_text(x_request_id)
    except ValueError:
        raise Unprocessable("X-Request-ID must not contain NUL", loc=["header", "x-request-id"]) from None
    return x_request_id


RequestKey = Annotated[str, Depends(request_key)]

tokens = APIRouter(tags=["sandboxes"], responses=ERROR_RESPONSES)
class SwerexRoute(APIRoute):
    """write_file's content (JSON) and upload's file may be up to max_upload_mb, like a file
    written through the files API; every route of the runtime shares that body limit."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.openapi_extra = body_limit("max_upload_mb", self.openapi_extra)


router = APIRouter(prefix=PREFIX, include_in_schema=False, route_class=SwerexRoute)
MAX_FIELDS = 8


@tokens.post("/v1/sandboxes/{sandbox_id}/swerex-token", status_code=201, response_model=SwerexToken,
             operation_id="create_swerex_token")
async def create_swerex_token(sandbox_id: str, tenant: Tenant, service: Service, request: Request) -> SwerexToken:
    """A SWE-ReX remote runtime for this sandbox: ``RemoteRuntime(host=url, port=None,
    auth_token=token)`` works unchanged. Every request it sends is a step of ``rollout_id``
    (its X-Request-ID the step's key: a retried request never runs twice); ``close()``
    finishes that rollout and deletes the sandbox."""
    return await service.issue(tenant, sandbox_id, str(request.base_url))


def swerexception(exc: SwerexError) -> JSONResponse:
    return JSONResponse(status_code=511, content={"swerexception": exc.transfer.model_dump()})


async def _call(service: SwerexService, row: RolloutRow, name: str, body, key: str):
    try:
        return await service.call(row, name, body, key)
    except SwerexError as exc:
        return swerexception(exc)


@router.get("")
@router.get("/")
async def root(_: Runtime) -> dict[str, str]:
    return {"message": "hello world"}


@router.get("/is_alive", response_model=IsAliveResponse)
async def is_alive(row: Runtime, service: Service) -> IsAliveResponse:
    return await service.is_alive(row)


@router.post("/create_session")
async def create_session(body: CreateBashSessionRequest, row: Runtime, service: Service, key: RequestKey):
    return await _call(service, row, "create_session", body, key)


@router.post("/run_in_session")
async def run_in_session(body: Action, row: Runtime, service: Service, key: RequestKey):
    return await _call(service, row, "bash" if isinstance(body, BashAction) else "bash_interrupt", body, key)


@router.post("/close_session")
async def close_session(body: CloseBashSessionRequest, row: Runtime, service: Service, key: RequestKey):
    return await _call(service, row, "close_session", body, key)


@router.post("/execute")
async def execute(body: Command, row: Runtime, service: Service, key: RequestKey):
    return await _call(service, row, "execute", body, key)


@router.post("/read_file")
async def read_file(body: ReadFileRequest, row: Runtime, service: Service, key: RequestKey):
    return await _call(service, row, "read_file", body, key)


@router.post("/write_file")
async def write_file(body: WriteFileRequest, row: Runtime, service: Service, key: RequestKey):
    return await _call(service, row, "write_file", body, key)


@router.post("/upload")
async def upload(request: Request, row: Runtime, service: Service) -> dict:
    """multipart/form-data: ``file``, ``target_path``, ``unzip`` ("true" to extract a zip into
    it). Nothing of it touches the api's disk. A file after its fields streams into the
    sandbox as it arrives; SWE-ReX's client sends the file first, which is then held in memory
    until the fields say where it goes (at most max_upload_mb, the body limit), as a zip is
    anyway (its index is at its end)."""
    fields: dict[str, str] = {}
    held: bytearray | None = None

    def destination() -> tuple[str, bool]:
        target_path = fields.get("target_path")
        if not target_path or len(target_path) > 4096 or "\0" in target_path:
            raise BadRequest("missing or invalid form field 'target_path'", loc=["body", "target_path"])
        return target_path, fields.get("unzip", "false").lower() in ("true", "1", "yes", "on")

    async for part in multipart_parts(request.stream(), request.headers.get("content-type", "")):
        if part.filename is None:
            if len(fields) >= MAX_FIELDS:
                raise BadRequest(f"more than {MAX_FIELDS} form fields", loc=["body"])
            fields[part.name] = await part.text()
        elif part.name != "file" or held is not None:
            raise BadRequest(f"unexpected file part {part.name!r}: the upload is the one part 'file'",
                             loc=["body", part.name])
        elif "target_path" in fields:
            await service.upload(row, part.content, *destination())
            return {}
        else:
            held = bytearray()
            async for chunk in part.content:
                held += chunk
    if held is None:
        raise BadRequest("missing the multipart file part 'file'", loc=["body", "file"])
    target_path, unzip = destination()

    async def content():
        yield bytes(held)

    await service.upload(row, content(), target_path, unzip)
    return {}


@router.post("/close")
async def close(row: Runtime, service: Service) -> dict:
    await service.close(row)
    return {}
