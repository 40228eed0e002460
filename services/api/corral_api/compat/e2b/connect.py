"""The Connect protocol (https://connectrpc.com/docs/protocol), JSON codec, identity
compression: all the e2b SDK's envd client speaks (``connectrpc`` 0.12 with
``_ProtoJSONCodec``, compression disabled both ways).

Why not the ``connectrpc`` server package: its generated stubs would tie the api's runtime to
e2b's pins (``connectrpc<0.13``, ``protobuf-py<0.7``) or need a protoc toolchain, for a
protocol whose JSON flavour is a 5-byte envelope and two error shapes. Messages are plain
dicts in proto-JSON form (lowerCamelCase, int64 as strings, bytes as base64, enum names).
"""

import json
import struct
from typing import Any

MESSAGE = 0x00
COMPRESSED = 0x01
END_STREAM = 0x02

STREAM_CONTENT_TYPE = "application/connect+json"
UNARY_CONTENT_TYPE = "application/json"

# Connect code → HTTP status of a unary error (connect protocol spec, "Error Codes").
HTTP_STATUS = {
    "canceled": 499, "unknown": 500, "invalid_argument": 400, "deadline_exceeded": 504, "not_found": 404,
    "already_exists": 409, "permission_denied": 403, "resource_exhausted": 429, "failed_precondition": 400,
    "aborted": 409, "out_of_range": 400, "unimplemented": 501, "internal": 500, "unavailable": 503,
    "data_loss": 500, "unauthenticated": 401,
}


class ConnectError(Exception):
    """An RPC error: ``code`` is a Connect code name (snake_case)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        assert code in HTTP_STATUS, code
        self.code = code
        self.message = message

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def envelope(message: dict[str, Any], flags: int = MESSAGE) -> bytes:
    payload = json.dumps(message, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(payload)) + payload


def end_of_stream(error: ConnectError | None = None) -> bytes:
    return envelope({"error": error.to_json()} if error else {}, END_STREAM)


def parse_stream_request(body: bytes) -> dict[str, Any]:
    """The one message of a server-streaming request (an enveloped JSON message)."""
    if len(body) < 5:
        raise ConnectError("invalid_argument", "streaming request must be one enveloped message")
    flags, length = struct.unpack(">BI", body[:5])
    if flags & COMPRESSED:
        raise ConnectError("unimplemented", "compressed messages are not supported (identity only)")
    if len(body) < 5 + length:
        raise ConnectError("invalid_argument", "truncated envelope")
    return parse_json(body[5:5 + length])


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        message = json.loads(raw or b"{}")
    except ValueError:
        raise ConnectError("invalid_argument", "request is not valid JSON") from None
    if not isinstance(message, dict):
        raise ConnectError("invalid_argument", "request must be a JSON object")
    return message


def timeout_s(headers: Any, default: float) -> float:
    """The call's deadline from ``connect-timeout-ms`` (absent: ``default``)."""
    raw = headers.get("connect-timeout-ms")
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConnectError("invalid_argument", "connect-timeout-ms must be an integer") from None
    if value <= 0:
        return default
    return value / 1000
