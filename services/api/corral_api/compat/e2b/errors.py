"""E2B's error shapes: the SDK parses every REST error as JSON ``{"code": int, "message": str}``
(anything else raises ``JSONDecodeError``/``KeyError`` in its generated client instead of the
right exception), and every envd call to a sandbox that is gone or paused as the edge
proxy's 502 "…was not found" (``SandboxNotRunningException``, ``is_running() == False``)."""

from collections.abc import Callable, Coroutine
from typing import Any

import httpx
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from corral_common.logging import get_logger
from corral_common.web.errors import CorralError, refusal_body
from corral_common.web.handlers import http_error_response

log = get_logger(__name__)


class E2bError(Exception):
    def __init__(self, status_code: int, message: str, *, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.headers = headers or {}


class SandboxGone(E2bError):
    """An envd call to a sandbox that is not running (killed, paused, unknown, another tenant's)."""

    def __init__(self, sandbox_id: str):
        super().__init__(502, "The sandbox was not found")
        self.sandbox_id = sandbox_id


def error_response(status_code: int, message: str, headers: dict[str, str] | None = None,
                   **extra: Any) -> JSONResponse:
    return JSONResponse({"code": status_code, "message": message, **extra}, status_code=status_code,
                        headers=headers)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


# First path segments of E2B's control plane (its OpenAPI spec): a request there that no route
# of this surface takes is an E2B client calling something Corral does not offer.
CONTROL_PLANE_ROOTS = frozenset({"sandboxes", "v2", "v3", "templates", "snapshots", "volumes", "teams", "nodes",
                                 "access-tokens", "api-keys", "health"})


def is_e2b_request(request: Request) -> bool:
    """Whether an E2B SDK sent this: envd and the code interpreter name the sandbox in a header
    on every call; the control plane lives outside Corral's /v1."""
    if "e2b-sandbox-id" in request.headers:
        return True
    return request.url.path.split("/", 2)[1] in CONTROL_PLANE_ROOTS


def refused_response(scope: Any, error: CorralError) -> Response:
    """A request refused before routing (a NUL in its URL: corral_common.web.guards), in E2B's shape
    for an E2B client."""
    if is_e2b_request(Request(scope)):
        return error_response(error.status_code, error.message, error.response_headers() or None)
    return refusal_body(scope, error)


async def unknown_route_response(request: Request, exc: StarletteHTTPException) -> Response:
    """No route (404) or no such method (405): in E2B's shape for an E2B client (its SDK parses
    every error body as ``{code, message}``), in the platform's otherwise."""
    if not is_e2b_request(request):
        return await http_error_response(request, exc)
    what = "is not supported by this E2B-compatible server (Corral)" if exc.status_code in (404, 405) else exc.detail
    return error_response(exc.status_code, f"{request.method} {request.url.path} {what}",
                          dict(getattr(exc, "headers", None) or {}) or None)


class E2bRoute(APIRoute):
    """Answers every error of its routes in E2B's shape, whatever raised it."""

    # For answers made outside the route (corral_api.body_limits' 413).
    error_response = staticmethod(error_response)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except SandboxGone as exc:
                return error_response(exc.status_code, exc.message, sandboxId=exc.sandbox_id)
            except E2bError as exc:
                return error_response(exc.status_code, exc.message, exc.headers)
            except CorralError as exc:
                # 400 for a body Corral refuses: the SDK retries 429/502/503/504 only.
                return error_response(exc.status_code, exc.message, exc.response_headers())
            except RequestValidationError as exc:
                return error_response(400, _validation_message(exc))
            except httpx.PoolTimeout:
                return error_response(503, "api overloaded: no free connection to the node", {"Retry-After": "1"})
            except Exception:
                log.exception("e2b.internal_error", path=request.url.path)
                return error_response(500, "internal error")

        return route
