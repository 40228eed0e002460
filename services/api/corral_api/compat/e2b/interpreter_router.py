"""The code interpreter's routes (E2B sends them to port 49999: ``E2b-Sandbox-Port: 49999``;
the paths are its own, so they need no header routing): ``POST /execute`` (NDJSON) and
``/contexts``. Authenticated like envd, by the sandbox's access or traffic token."""

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from corral_api.compat.e2b.envd import resolve
from corral_api.compat.e2b.errors import E2bRoute
from corral_api.compat.e2b.interpreter import Interpreter
from corral_api.deps import service_of

router = APIRouter(route_class=E2bRoute, include_in_schema=False, tags=["e2b code interpreter"])


class ExecuteBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    code: str = Field(..., max_length=10 * 1024 * 1024)
    context_id: str | None = Field(None, max_length=64)
    language: str | None = Field(None, max_length=32)
    env_vars: dict[str, str] | None = None


class ContextBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    cwd: str | None = Field(None, max_length=4096)
    language: str | None = Field(None, max_length=32)


@router.post("/execute")
async def execute(body: ExecuteBody, request: Request) -> StreamingResponse:
    call = await resolve(request, allow_traffic=True)
    interpreter = service_of(request, Interpreter)
    context = (interpreter.get(call.sandbox_id, body.context_id) if body.context_id
               else interpreter.default(call.sandbox_id, body.language))
    lines = await interpreter.execute(call.tenant, context, body.code, body.env_vars or {})
    return StreamingResponse(lines, media_type="application/x-ndjson")


@router.post("/contexts")
async def create_context(request: Request, body: ContextBody | None = None) -> JSONResponse:
    call = await resolve(request, allow_traffic=True)
    body = body or ContextBody()
    context = service_of(request, Interpreter).create(call.sandbox_id, call.path(body.cwd) if body.cwd else None, body.language)
    return JSONResponse(context.to_json())


@router.get("/contexts")
async def list_contexts(request: Request) -> JSONResponse:
    call = await resolve(request, allow_traffic=True)
    contexts: list[dict[str, Any]] = [c.to_json() for c in service_of(request, Interpreter).list(call.sandbox_id)]
    return JSONResponse(contexts)


@router.post("/contexts/{context_id}/restart", status_code=204)
async def restart_context(context_id: str, request: Request) -> Response:
    call = await resolve(request, allow_traffic=True)
    interpreter = service_of(request, Interpreter)
    await interpreter.restart(interpreter.get(call.sandbox_id, context_id))
    return Response(status_code=204)


@router.delete("/contexts/{context_id}", status_code=204)
async def delete_context(context_id: str, request: Request) -> Response:
    call = await resolve(request, allow_traffic=True)
    interpreter = service_of(request, Interpreter)
    await interpreter.delete(interpreter.get(call.sandbox_id, context_id))
    return Response(status_code=204)
