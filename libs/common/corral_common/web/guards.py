"""The ASGI guard every service runs in front of its routes (``web.handlers.install_error_handlers``).

- **Text a JSON body cannot carry.** JSON may spell a lone UTF-16 surrogate (``"\\ud800"``);
  Python decodes it into a str that no UTF-8 encoder takes, so it passed validation and
  failed later (storing the record, forwarding the request) with a 500 and a dropped
  connection. The guard watches each JSON body as the route reads it and refuses one that
  holds such a string with a 422 ``invalid_text`` whose ``loc`` names the field
  (``["body", "labels", "a"]``). The body still streams through untouched: only a body with
  a ``\\uD8xx``-``\\uDFxx`` escape in it is parsed a second time, to find the field.
- **NUL in a URL** (path or query): 422 ``invalid_text`` naming the parameter, before any
  route looks the value up.
- **Unexpected exceptions** become the JSON error body (500 ``internal_error``, logged with
  the traceback) instead of Starlette's text/plain "Internal Server Error"; the message says
  nothing of the internals. A response that had already started cannot be changed: then the
  exception goes on to the server, which closes the connection.
"""

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral_common.inputs import INVALID_TEXT
from corral_common.logging import get_logger
from corral_common.web.errors import CorralError, Unprocessable, error_body, refusal_body

log = get_logger(__name__)

# A JSON escape of a surrogate code point (paired ones are fine, but this finds both kinds).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


class InvalidText(Unprocessable, StarletteHTTPException):
    """A string in the body is not text. Raised while the route reads its body: FastAPI passes
    a Starlette HTTPException on from there, and the CorralError handler renders it."""

    code = INVALID_TEXT

    def __init__(self, message: str, loc: list[str | int]):
        super().__init__(message, loc=loc)
        # CorralError's super().__init__(message) was Starlette's, which took it for the status.
        self.status_code, self.detail, self.headers = Unprocessable.status_code, message, None


def _printable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unencodable(value: Any, loc: list[str | int]) -> tuple[list[str | int], str] | None:
    """The location and the escaped text of the first string in a parsed JSON value (keys
    included) that cannot be encoded as UTF-8, or None."""
    if isinstance(value, str):
        return None if _encodable(value) else (loc, _printable(value))
    if isinstance(value, list):
        for i, item in enumerate(value):
            if found := unencodable(item, [*loc, i]):
                return found
    elif isinstance(value, dict):
        for key, item in value.items():
            if not _encodable(key):
                return [*loc, _printable(key)], _printable(key)
            if found := unencodable(item, [*loc, key]):
                return found
    return None


def _is_json(scope: Scope) -> bool:
    """FastAPI's own rule for which bodies it parses as JSON: application/json or
    application/*+json, parameters aside."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media_type = value.split(b";", 1)[0].strip().lower()
            return media_type == b"application/json" or (media_type.startswith(b"application/")
                                                          and media_type.endswith(b"+json"))
    return False


def check_json_text(body: bytes) -> None:
    """Raise InvalidText for a JSON body holding a string that is not text; anything else
    (even invalid JSON: the route reports that) passes."""
    if not _SURROGATE_ESCAPE.search(body):
        return
    try:
        parsed = json.loads(body)
    except ValueError:
        return
    if found := unencodable(parsed, ["body"]):
        loc, text = found
        where = ".".join(str(p) for p in loc)
        raise InvalidText(f"{where}: not valid Unicode text (a lone UTF-16 surrogate: {text[:80]}); every string "
                          "must be encodable as UTF-8", loc)


def nul_in_url(scope: Scope) -> InvalidText | None:
    """A NUL in the path or a query parameter names nothing that exists (and PostgreSQL text
    cannot even hold it to look it up)."""
    if "\0" in scope.get("path", ""):
        return InvalidText("the URL path must not contain NUL characters", ["path"])
    query = scope.get("query_string", b"")
    if b"%00" in query or b"\0" in query:
        for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            if "\0" in name or "\0" in value:
                return InvalidText(f"query parameter {_printable(name)!r} must not contain NUL characters",
                                   ["query", name.replace("\0", "\\0")])
    return None


class RequestGuard:
    def __init__(self, app: ASGIApp, refusal: Callable[[Scope, CorralError], Response] = refusal_body):
        self.app = app
        self.refusal = refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if refused := nul_in_url(scope):
            await self.refusal(scope, refused)(scope, receive, send)
            return
        if _is_json(scope):
            receive = _checked(receive)
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            if started:
                raise
            log.exception("http.unhandled_error", method=scope.get("method"), path=scope.get("path"))
            response = JSONResponse(error_body("internal_error", "internal error: the request could not be "
                                               "completed (the service logged why)"), status_code=500)
            await response(scope, receive, send)


def _checked(receive: Receive) -> Receive:
    chunks: list[bytes] = []
    suspicious = False

    async def checked() -> Message:
        nonlocal suspicious
        message = await receive()
        if message["type"] != "http.request":
            return message
        chunk = message.get("body", b"")
        # An escape split across two chunks is found where they join.
        suspicious = suspicious or bool(_SURROGATE_ESCAPE.search(chunk)) or bool(
            chunks and _SURROGATE_ESCAPE.search(chunks[-1][-5:] + chunk[:5]))
        chunks.append(chunk)
        if not message.get("more_body", False) and suspicious:
            check_json_text(b"".join(chunks))
        return message

    return checked
