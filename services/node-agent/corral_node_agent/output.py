"""Capped, non-blocking reading of a child's stdout/stderr pipes: the one reader container
execs and fncall runs share.

The pipe is read straight from its fd with ``loop.add_reader`` (no asyncio transport or
stream: cheaper per run). At most ``keep`` bytes are kept; once more than ``limit`` came
through, our read end is closed at once: the writer then dies of SIGPIPE (or gets EPIPE)
instead of keeping the node busy producing output nobody will keep.
"""

import asyncio
import codecs
import os
from collections.abc import Callable


class CappedPipe:
    def __init__(self, fd: int, limit: int, name: str = "",
                 on_data: Callable[[str, str], None] | None = None, *,
                 keep: int | None = None, on_overflow: Callable[[], None] | None = None):
        """``on_data(name, text)`` gets the kept output as it arrives (decoded, never splitting
        a UTF-8 sequence); ``on_overflow()`` is called once when more than ``limit`` bytes came."""
        self.fd = fd
        self.limit = limit
        self.keep = limit if keep is None else keep
        self.name = name
        self.buf = bytearray()
        self.total = 0
        self.truncated = False  # more than `limit` bytes were written
        self._on_data = on_data
        self._on_overflow = on_overflow
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace") if on_data else None
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
                text = self._decoder.decode(kept)
                if text:
                    self._on_data(self.name, text)
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
            tail = self._decoder.decode(b"", final=True)
            if tail:
                self._on_data(self.name, tail)
        if not self.done.done():
            self.done.set_result(None)

    def data(self) -> bytes:
        return bytes(self.buf)

    def text(self) -> str:
        return self.buf.decode("utf-8", errors="replace")
