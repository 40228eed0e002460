"""The node-agent's HTTP answer to each of its errors: the one place statuses and codes live.

The api passes these bodies on to users, so a row here is public API: change one only with
the api's docs. A class not in the table (``RuntimeFailure``, ``StartFailed``, which only
travels the bus as ``failed(reason)``) is not the caller's business: it stays a 500. The most
specific row wins (``EnvironmentNotFound`` is both an ``ImageUnavailable`` and a
``NotFound``: 404 ``environment_not_found``).
"""

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from corral_common.web.errors import CorralError
from corral_common.web.handlers import install_error_handlers
from corral_node_agent import errors

HTTP_ERRORS: dict[type[errors.NodeAgentError], tuple[int, str]] = {
    errors.BadInput: (400, "bad_request"),
    errors.NotFound: (404, "not_found"),
    errors.EnvironmentNotFound: (404, "environment_not_found"),
    errors.DiskImageNotFound: (404, "disk_image_not_found"),
    errors.Conflict: (409, "conflict"),
    errors.AlreadyExists: (409, "conflict"),
    errors.SandboxPaused: (409, "sandbox_paused"),
    errors.SandboxNotRunning: (409, "sandbox_not_running"),
    errors.Unsupported: (409, "unsupported_by_backend"),
    errors.TooLarge: (413, "payload_too_large"),
    errors.DiskFull: (507, "disk_full"),
    errors.GuestAgentError: (500, "guest_agent_error"),
    errors.ImageUnavailable: (502, "image_unavailable"),
    errors.PortClosed: (502, "port_not_open"),
    errors.PortBadAnswer: (502, "port_bad_answer"),
    errors.GuestLost: (502, "guest_agent_lost"),
    errors.Unavailable: (503, "unavailable"),
    errors.GuestKitMissing: (503, "guest_kit_missing"),
    errors.GuestTimeout: (504, "guest_agent_timeout"),
}


def http_error(exc: errors.NodeAgentError) -> CorralError:
    """The API error for exc (status, code, message, loc); raises LookupError for a class with no row."""
    for cls in type(exc).__mro__:
        if cls in HTTP_ERRORS:
            status, code = HTTP_ERRORS[cls]
            return CorralError(exc.message, loc=exc.loc, code=code, status_code=status)
    raise LookupError(f"{type(exc).__name__} has no HTTP answer")


def install_node_error_handlers(app: FastAPI) -> None:
    """corral_common's handlers (CorralError, validation, HTTP) plus one per row of the table."""
    install_error_handlers(app)

    async def _node_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, errors.NodeAgentError)
        error = http_error(exc)
        return JSONResponse(error.to_body(), status_code=error.status_code)

    for cls in HTTP_ERRORS:
        app.add_exception_handler(cls, _node_error)
