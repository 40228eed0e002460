"""Capped, non-blocking reading of a child's stdout/stderr pipes: the one reader container
execs and fncall runs share.

The pipe is read straight from its fd with ``loop.add_reader`` (no asyncio transport or
stream: cheaper per run). At most ``keep`` bytes are kept; once more than ``limit`` came
through, our read end is closed at once: the writer then dies of SIGPIPE (or gets EPIPE)
instead of keeping the node busy producing output nobody will keep.

``OutputEncoder`` turns raw output into the strings an exec answer carries, for the
container reader here and the VM guest agent's client alike (one place decides what
"utf-8" and "base64" output mean).
"""

import asyncio
import base64
import codecs
import os
from collections.abc import Callable

from corral_common.contracts.exec import OutputEncoding


def encode_output(data: bytes, encoding: OutputEncoding) -> str:
    """All of a stream's kept bytes as ExecResult.stdout/stderr carry them."""
    if encoding == "base64":
        return base64.b64encode(data).decode("ascii")
    return data.decode("utf-8", errors="replace")


class OutputEncoder:
    """A stream's output as it arrives, piece by piece, in ``encoding``: "utf-8" decodes
    (invalid bytes become U+FFFD; a character split across reads is held back until it is
    whole), "base64" encodes each piece on its own, so every chunk decodes by itself."""

    def __init__(self, encoding: OutputEncoding):
        self.encoding = encoding
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace") if encoding == "utf-8" else None

    def feed(self, data: bytes) -> str:
        """The encoded piece ("" when there is nothing to send yet)."""
        if self._decoder is None:
            return base64.b64encode(data).decode("ascii")
        return self._decoder.decode(data)

    def flush(self) -> str:
        """What was held back, at the end of the stream (a truncated character: U+FFFD)."""
        return "" if self._decoder is None else self._decoder.decode(b"", final=True)


class CappedPipe:
    def __init__(self, fd: int, limit: int, name: str = "",
                 on_data: Callable[[str, str], None] | None = None, *,
                 keep: int | None = None, on_overflow: Callable[[], None] | None = None,
                 encoding: OutputEncoding = "utf-8"):
        """``on_data(name, piece)`` gets the kept output as it arrives, encoded as
        ``encoding`` (see OutputEncoder); ``on_overflow()`` is called once when more than
        ``limit`` bytes came. The limit and the cap count raw bytes."""
        self.fd = fd
        self.limit = limit
        self.keep = limit if keep is None else keep
        self.name = name
        self.encoding = encoding
        self.buf = bytearray()
        self.total = 0
        self.truncated = False  # more than `limit` bytes were written
        self._on_data = on_data
        self._on_overflow = on_overflow
        self._encoder = OutputEncoder(encoding) if on_data else None
        self._loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self._loop.create_future()
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        while True:  # everything there is now (bounded: the pipe is closed past `limit`)
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.close()
                return
            self.total += len(data)
            kept = data[:max(self.keep - len(self.buf), 0)]
            self.buf += kept
            if kept and self._on_data is not None:
                piece = self._encoder.feed(kept)
                if piece:
                    self._on_data(self.name, piece)
            if self.total > self.limit:
                self.truncated = True
                if self._on_overflow is not None:
                    self._on_overflow()
                self.close()
                return

    def close(self) -> None:
        if self.fd < 0:
            return
        self._loop.remove_reader(self.fd)
        os.close(self.fd)
        self.fd = -1
        if self._on_data is not None:
            tail = self._encoder.flush()
            if tail:
                self._on_data(self.name, tail)
        if not self.done.done():
            self.done.set_result(None)

    def data(self) -> bytes:
        return bytes(self.buf)

    def text(self) -> str:
        """The kept output in the pipe's encoding (ExecResult.stdout/stderr)."""
        return encode_output(self.buf, self.encoding)
