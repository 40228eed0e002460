"""Capped, non-blocking reading of a command's stdout/stderr pipes."""

import asyncio
import codecs
import os
from collections.abc import Callable


class CappedPipe:
    """Reads one pipe into memory, keeping at most `limit` bytes.

    Past the cap our read end is closed at once: the writer then dies of SIGPIPE (or gets
    EPIPE) instead of keeping the node busy producing output nobody will keep.
    """

    def __init__(self, fd: int, limit: int, name: str,
                 on_data: Callable[[str, str], None] | None = None):
        self.fd = fd
        self.limit = limit
        self.name = name
        self.buf = bytearray()
        self.truncated = False
        self._on_data = on_data
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self._loop.create_future()
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._readable)

    def feed(self, data: bytes) -> bytes:
        """Keep what fits under the cap; returns the kept part."""
        room = self.limit - len(self.buf)
        if len(data) > room:
            self.truncated = True
            data = data[:max(room, 0)]
        self.buf += data
        return data

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        kept = self.feed(data)
        if kept and self._on_data is not None:
            text = self._decoder.decode(kept)
            if text:
                self._on_data(self.name, text)
        if self.truncated:
            self.close()

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

    def text(self) -> str:
        return self.buf.decode("utf-8", errors="replace")
