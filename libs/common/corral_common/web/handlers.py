"""``install_error_handlers`` gives every service the one error shape
(``corral_common.web.errors``) for every error: its own (``CorralError``), validation (422; the checks of
``corral_common.inputs`` name their code), Starlette's 404/405 (a 405 says ``Allow``: every
method of the path; ``OPTIONS`` on a known path is a 204 with it), a backing service away or a
bounded wait run out (503, ``corral_common.web.overload``), text a JSON body cannot carry and
unexpected exceptions (500 ``internal_error``), the last two through ``corral_common.web.guards``.
"""

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path, get_route_path

try:  # newer FastAPI keeps included routers nested; this lists their routes with full paths
    from fastapi.routing import iter_route_contexts as _flat_routes
except ImportError:  # older FastAPI copies every route, full path and all, into the app's router
    def _flat_routes(routes):  # type: ignore[misc]  # same call, untyped: the routes as they are
        return routes

from corral_common.inputs import INPUT_ERROR_CODES
from corral_common.web.errors import CorralError, error_body, refusal_body
from corral_common.web.guards import RequestGuard
from corral_common.web.overload import install_overload_handlers


def install_error_handlers(app: FastAPI, refusal: Callable[[Any, CorralError], Response] = refusal_body) -> None:
    """``refusal(scope, error)``: how a request refused before any route sees it is answered
    (a service that speaks another error shape on some paths passes its own)."""
    @app.exception_handler(CorralError)
    async def _corral_error(_: Request, exc: CorralError) -> JSONResponse:
        return JSONResponse(exc.to_body(), status_code=exc.status_code, headers=exc.response_headers())

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
