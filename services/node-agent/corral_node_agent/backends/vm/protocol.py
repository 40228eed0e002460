"""Wire format of the guest agent protocol (docs/vm-guest-protocol.md), host side.

A frame is a 4-byte big-endian length followed by that many bytes of one JSON object
(UTF-8). Binary payloads (file data, command output, stdin) travel base64-encoded in a
`data`/`stdin` field. A run of MARKER (8 x 0xFF) resynchronises a stream: it can never
occur inside valid frames (lengths are < 2**24, so a header starts with 0x00, and UTF-8
never contains 0xFF), so a reader that sees it drops whatever partial frame it holds.
"""

import base64
import json
import struct
from typing import Any

from corral_node_agent.errors import RuntimeFailure

PROTOCOL_VERSION = 1
MARKER = b"\xff" * 8
# Bigger frames are a framing error on both sides. The host keeps its own frames (file
# chunks) far below it.
MAX_FRAME = 4 << 20
# File data per write_data frame: 192 KiB raw = 256 KiB base64.
WRITE_CHUNK = 192 << 10


class ProtocolError(RuntimeFailure):
    """The byte stream is not valid protocol (a framing error, not a failed request)."""


def encode_frame(message: dict[str, Any]) -> bytes:
    payload = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
    if len(payload) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(payload)} bytes exceeds {MAX_FRAME}")
    return struct.pack(">I", len(payload)) + payload


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


class FrameDecoder:
    """Incremental decoder: feed() bytes as they come, get whole messages back.

    Until the first marker is seen (when `wait_for_marker`), everything is dropped: bytes
    queued by a previous host session must not be taken for answers to this one.
    """

    def __init__(self, *, wait_for_marker: bool = True):
        self._buf = bytearray()
        self._synced = not wait_for_marker
        self._ff_run = 0
        self.markers_seen = 0

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        start = 0
        # Only runs of 0xFF matter, and find() skips everything else at C speed.
        i = data.find(b"\xff")
        while i >= 0:
            if i > 0 and data[i - 1] != 0xFF:
                self._ff_run = 0
            self._ff_run += 1
            if self._ff_run == len(MARKER):
                self._ff_run = 0
                self._buf.clear()
                self._synced = True
                self.markers_seen += 1
                start = i + 1
            i = data.find(b"\xff", i + 1)
        if data and data[-1] != 0xFF:
            self._ff_run = 0
        if not self._synced:
            return []
        self._buf += data[start:]
        out = []
        while len(self._buf) >= 4:
            (length,) = struct.unpack_from(">I", self._buf)
            if length == 0 or length > MAX_FRAME:
                self._synced = False
                self._buf.clear()
                raise ProtocolError(f"bad frame length {length}")
            if len(self._buf) < 4 + length:
                break
            raw = bytes(self._buf[4:4 + length])
            del self._buf[:4 + length]
            try:
                message = json.loads(raw)
            except ValueError as exc:
                self._synced = False
                self._buf.clear()
                raise ProtocolError(f"frame is not JSON: {exc}") from None
            if not isinstance(message, dict):
                self._synced = False
                self._buf.clear()
                raise ProtocolError("frame is not a JSON object")
            out.append(message)
        return out
