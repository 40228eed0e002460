"""One error shape for every service: ``{"error": {"code", "message", "details"}}``.

``details`` is a list of ``{"loc": [...], "msg": ...}`` so a client can tell which field
(query, body, path) was wrong.

This module holds the error types and the body they render to, and nothing that installs
them: ``corral_common.web.handlers.install_error_handlers`` does that, building on this
module, ``guards`` and ``overload`` (which both build on this one too, so none of them imports
another lazily).
"""

from typing import Any

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

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
    """The platform's answer to a request refused before routing (corral_common.web.guards)."""
    return JSONResponse(error.to_body(), status_code=error.status_code, headers=error.response_headers() or None)


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
