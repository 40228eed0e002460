"""Request body limits: every route's body is counted as it arrives and refused with a JSON 413
once it passes the route's limit, whatever its framing (``Content-Length`` or chunked), before
any parser (JSON, form, multipart) or the route holds it.

Each route has the default limit, ``max_body_kb`` (an exec, a create, an E2B RPC: a few KB of
JSON), unless it declares a larger one with ``openapi_extra=body_limit("<setting>")``, the
name of the ``ApiSettings`` field (in MB) that bounds it: uploads (``max_upload_mb``), image
imports (``image_max_upload_mb``), fncall calls and batches (``fncall.max_body_mb``). The
declaration is in the route's OpenAPI entry too (``x-corral-max-body``).

Why a pure ASGI middleware counting ``http.request`` messages and not ``Content-Length`` in a
route: a chunked body has no length, and a route only sees its body after FastAPI parsed it
whole (a 190 MB JSON exec body took the api from 163 MB to 1 GB). The route is known when the
body is first read (routing has put it in the scope by then), so a body no route reads is
never counted, and a declared length over the limit is refused before a byte is read. Past the
limit the route's read raises ``PayloadTooLarge``; whatever the route answers then is dropped
and, once it has unwound, the middleware answers the 413 (E2B routes in E2B's ``{code, message}``
shape).
uvicorn discards the rest of the body once the answer is complete, so the client that is still
sending gets the 413, not a reset.
"""

from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral_common.web.errors import PayloadTooLarge

BODY_LIMIT_KEY = "x-corral-max-body"
MB = 1024 * 1024


def body_limit(setting: str, openapi_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``openapi_extra`` of a route whose body may be larger than the default: ``setting``
    names the ``ApiSettings`` field (MB; dotted for a nested one, e.g. ``fncall.max_body_mb``)."""
    return {**(openapi_extra or {}), BODY_LIMIT_KEY: setting}


def route_body_limit(route: Any, settings: Any) -> tuple[int, str]:
    """The body limit of ``route`` in bytes and the setting it comes from."""
    setting = (getattr(route, "openapi_extra", None) or {}).get(BODY_LIMIT_KEY)
    if setting is None:
        return settings.max_body_kb * 1024, "max_body_kb"
    value: Any = settings
    for name in setting.split("."):
        value = getattr(value, name)
    return value * MB, setting


def too_large(route: Any, limit: int, setting: str) -> tuple[PayloadTooLarge, JSONResponse]:
    """The error and its answer: in the platform's shape, or the route class's own
    (``error_response(status, message)``, E2B's ``{code, message}``)."""
    error = PayloadTooLarge(f"request body is over this route's limit of {limit} bytes ({setting})", loc=["body"],
                            extra={"limit_bytes": limit})
    own_shape = getattr(route, "error_response", None)
    if own_shape is not None:
        return error, own_shape(413, error.message)
    return error, JSONResponse(error.to_body(), status_code=413)


class BodyLimitMiddleware:
    """Counts each request's body against its route's limit (``app.state.settings``)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        settings = getattr(scope["app"].state, "settings", None) if scope["type"] == "http" and "app" in scope else None
        if settings is None:
            await self.app(scope, receive, send)
            return
        limit: int | None = None
        setting = ""
        seen = 0
        started_before = False  # the route answered before its body outgrew the limit (a stream)
        refused: PayloadTooLarge | None = None

        def refuse() -> PayloadTooLarge:
            nonlocal refused
            refused = refused or too_large(scope.get("route"), limit or 0, setting)[0]
            return refused

        async def counted_receive() -> Message:
            nonlocal limit, setting, seen
            if refused is not None:
                raise refused  # a route that read on after its failed read
            if limit is None:
                limit, setting = route_body_limit(scope.get("route"), settings)
                declared = _content_length(scope)
                if declared is not None and declared > limit:
                    raise refuse()
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise refuse()
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started_before
            if refused is not None and not started_before:
                return  # the route's answer to its failed read: the client gets the 413 instead
            if message["type"] == "http.response.start":
                started_before = True
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception:  # noqa: BLE001 - after a refused read: how the route failed for want of its body
            if refused is None or started_before:
                raise
        # Answered once the route has unwound: whatever it did with the body (an upload into a
        # sandbox) was aborted before the client hears of it.
        if refused is not None and not started_before:
            await too_large(scope.get("route"), limit or 0, setting)[1](scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def capped(stream: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    """Passes a body the route transforms (an E2B upload it gunzips) through, failing once what
    comes out grows past ``limit`` bytes: the raw stream was counted above, its expansion is not."""
    seen = 0
    async for chunk in stream:
        seen += len(chunk)
        if seen > limit:
            raise PayloadTooLarge(f"upload exceeds {limit} bytes", loc=["body"])
        yield chunk
