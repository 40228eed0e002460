"""One error shape for every service: ``{"error": {"code", "message", "details"}}``.

``details`` is a list of ``{"loc": [...], "msg": ...}`` so a client can tell which field
(query, body, path) was wrong.

``install_error_handlers`` gives every service that shape for every error: its own
(``CorralError``), validation (422; the checks of ``corral_common.inputs`` name their code),
Starlette's 404/405 (a 405 says ``Allow``: every method of the path; ``OPTIONS`` on a known
path is a 204 with it), text a JSON body cannot carry and unexpected exceptions (500
``internal_error``), the last two through ``corral_common.guards``.
"""

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path, get_route_path

try:  # newer FastAPI keeps included routers nested; this lists their routes with full paths
    from fastapi.routing import iter_route_contexts as _flat_routes
except ImportError:  # older FastAPI copies every route, full path and all, into the app's router
    def _flat_routes(routes):
        return routes

from corral_common.inputs import INPUT_ERROR_CODES

# Seconds a 429 or 503 tells the caller to wait before trying again, unless it says otherwise.
DEFAULT_RETRY_AFTER_S = 1


class CorralError(Exception):
    """An error with an HTTP status, a machine-readable code and where it happened."""

    status_code = 400
    code = "bad_request"

    def __init__(self, message: str, *, loc: list[str | int] | None = None, code: str | None = None,
                 status_code: int | None = None, extra: dict[str, Any] | None = None,
                 retry_after_s: int | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc
        if code:
            self.code = code
        if status_code:
            self.status_code = status_code
        self.extra = extra or {}
        self.retry_after_s = retry_after_s

    def response_headers(self) -> dict[str, str]:
        """Every 429 and 503 says when to come back (``Retry-After``, default 1 s)."""
        if self.status_code in (429, 503):
            return {"Retry-After": str(self.retry_after_s or DEFAULT_RETRY_AFTER_S)}
        return {}

    def to_body(self) -> dict[str, Any]:
        details = [{"loc": self.loc, "msg": self.message}] if self.loc else []
        return {"error": {"code": self.code, "message": self.message, "details": details, **self.extra}}


def raise_for_upstream(response: Any, default_code: str, default_message: str) -> None:
    """An internal service's error answer (an httpx response carrying the common error body)
    raised again as the same CorralError: same status, code, message, loc and extra fields."""
    if response.status_code < 400:
        return
    try:
        error = response.json()["error"]
        extra = {k: v for k, v in error.items() if k not in ("code", "message", "details")}
        loc = (error.get("details") or [{}])[0].get("loc")
        message, code = error.get("message", response.text), error.get("code", default_code)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CorralError(response.text or default_message, status_code=response.status_code) from None
    raise CorralError(message, code=code, status_code=response.status_code, loc=loc, extra=extra)


class BadRequest(CorralError):
    status_code = 400
    code = "bad_request"


class Unauthorized(CorralError):
    status_code = 401
    code = "unauthorized"


class NotFound(CorralError):
    status_code = 404
    code = "not_found"


class Conflict(CorralError):
    status_code = 409
    code = "conflict"


class PayloadTooLarge(CorralError):
    status_code = 413
    code = "payload_too_large"


class Unprocessable(CorralError):
    status_code = 422
    code = "unprocessable"


class TooManyRequests(CorralError):
    """The caller is over a limit of its own (its tenant's in-flight requests): 429."""

    status_code = 429
    code = "too_many_requests"


class ServiceUnavailable(CorralError):
    status_code = 503
    code = "unavailable"


class Overloaded(ServiceUnavailable):
    """A bounded wait ran out (a pooled connection, a slot): 503, try again shortly."""

    code = "overloaded"


def error_body(code: str, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or []}}


def refusal_body(_: Any, error: CorralError) -> Response:
    """The platform's answer to a request refused before routing (corral_common.guards)."""
    return JSONResponse(error.to_body(), status_code=error.status_code, headers=error.response_headers() or None)


def install_error_handlers(app: FastAPI, refusal: Callable[[Any, CorralError], Response] = refusal_body) -> None:
    """``refusal(scope, error)``: how a request refused before any route sees it is answered
    (a service that speaks another error shape on some paths passes its own)."""
    @app.exception_handler(CorralError)
    async def _corral_error(_: Request, exc: CorralError) -> JSONResponse:
        return JSONResponse(exc.to_body(), status_code=exc.status_code, headers=exc.response_headers())

    from corral_common.overload import install_overload_handlers  # it builds on this module

    install_overload_handlers(app)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        details = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in errors]
        first = details[0] if details else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"])
        # A check of corral_common.inputs names its own code (invalid_name...).
        code = errors[0].get("type") if errors and errors[0].get("type") in INPUT_ERROR_CODES else "validation_error"
        return JSONResponse(error_body(code, f"{where}: {first['msg']}", details), status_code=422)

    app.add_exception_handler(StarletteHTTPException, http_error_response)  # type: ignore[arg-type]

    from corral_common.guards import RequestGuard  # it builds on this module

    app.add_middleware(RequestGuard, refusal=refusal)


async def http_error_response(request: Request, exc: StarletteHTTPException) -> Response:
    """Starlette's own errors (no such route, wrong method) in the platform's shape."""
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 405:
        # Starlette's Allow lists the first route of the path only; OPTIONS asks for them all.
        headers["Allow"] = ", ".join(allowed_methods(request))
        if request.method == "OPTIONS":
            return Response(status_code=204, headers=headers)
    code = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code, headers=headers or None)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app takes at the request's path, and OPTIONS."""
    path, methods = get_route_path(request.scope), {"OPTIONS"}
    for route in _flat_routes(request.app.router.routes):
        route_methods, route_path = getattr(route, "methods", None), getattr(route, "path", None)
        if route_methods and route_path and compile_path(route_path)[0].match(path):
            methods |= route_methods
    return sorted(methods)


class ErrorDetail(BaseModel):
    loc: list[str | int] | None = None
    msg: str


class ErrorInfo(BaseModel):
    code: str
    message: str
    details: list[ErrorDetail] = []


class ErrorResponse(BaseModel):
    """The body of every 4xx/5xx answer."""

    error: ErrorInfo


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": desc}
    for code, desc in {400: "Bad request", 401: "Missing or invalid API key", 404: "Not found",
                       409: "Conflict with the sandbox's state", 413: "Payload too large",
                       422: "Invalid input", 429: "Too many requests in flight for this tenant (see Retry-After)",
                       503: "A backing service is unavailable or overloaded (see Retry-After)"}.items()
}
