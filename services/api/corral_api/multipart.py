"""multipart/form-data as a stream of parts, each part's bytes as they arrive.

Starlette's ``request.form()`` spools every file part to a temporary file on the api host (on
disk past 1 MB) and a route then reads it whole: an upload cost the api its size in disk and
memory. Here python-multipart's streaming parser feeds each part's bytes to whoever consumes
them (a write into the sandbox), pulled chunk by chunk from the request: the api holds at most
one received chunk at a time, and nothing touches its disk. The body's size is bounded before
this parser by corral_api.body_limits.
"""

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from corral_common.web.errors import BadRequest

# A form field (not a file) is read whole: it is a path or a flag, never content.
MAX_FIELD_BYTES = 64 * 1024


@dataclass
class Part:
    name: str
    filename: str | None  # None: a form field, not a file
    content: AsyncIterator[bytes]  # consume it (or not) before asking for the next part

    async def text(self) -> str:
        """A form field's value (at most MAX_FIELD_BYTES)."""
        value = bytearray()
        async for chunk in self.content:
            value += chunk
            if len(value) > MAX_FIELD_BYTES:
                raise BadRequest(f"form field {self.name!r} is over {MAX_FIELD_BYTES} bytes", loc=["body", self.name])
        return value.decode("utf-8", "replace")


async def _events(stream: AsyncIterator[bytes], boundary: bytes) -> AsyncIterator[tuple[str, Any]]:
    """("headers", {name: value}), ("data", bytes)..., ("end", None) per part, in body order."""
    pending: list[tuple[str, Any]] = []
    field, value = bytearray(), bytearray()
    headers: dict[bytes, bytes] = {}
    finished = False

    def on_header_end() -> None:
        headers[bytes(field).lower()] = bytes(value)
        field.clear()
        value.clear()

    def on_headers_finished() -> None:
        pending.append(("headers", dict(headers)))
        headers.clear()

    def on_end() -> None:
        nonlocal finished
        finished = True

    parser = MultipartParser(boundary, {
        "on_header_field": lambda data, start, end: field.extend(data[start:end]),
        "on_header_value": lambda data, start, end: value.extend(data[start:end]),
        "on_header_end": on_header_end,
        "on_headers_finished": on_headers_finished,
        "on_part_data": lambda data, start, end: pending.append(("data", bytes(data[start:end]))),
        "on_part_end": lambda: pending.append(("end", None)),
        "on_end": on_end,
    })
    async for chunk in stream:
        try:
            parser.write(chunk)
        except MultipartParseError as exc:
            raise BadRequest(f"malformed multipart body: {exc}", loc=["body"]) from None
        for event in pending:
            yield event
        pending.clear()
    if not finished:
        raise BadRequest("multipart body ends before its closing boundary", loc=["body"])


async def multipart_parts(stream: AsyncIterator[bytes], content_type: str) -> AsyncIterator[Part]:
    """The parts of a multipart/form-data body, each with its bytes still to be read."""
    ctype, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if ctype != b"multipart/form-data" or not boundary:
        raise BadRequest("expected multipart/form-data with a boundary", loc=["header", "content-type"])
    events = _events(stream, boundary)

    async def content() -> AsyncIterator[bytes]:
        async for kind, data in events:
            if kind != "data":
                return
            yield data

    async for kind, headers in events:
        if kind != "headers":
            continue  # the rest of a part its consumer left unread
        _, params = parse_options_header(headers.get(b"content-disposition", b""))
        filename = params.get(b"filename")
        yield Part(name=params.get(b"name", b"").decode("utf-8", "replace"),
                   filename=None if filename is None else filename.decode("utf-8", "replace"), content=content())
