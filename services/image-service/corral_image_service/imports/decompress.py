"""A layer blob (tar, gzip or zstd) into a plain tar file, bounded, its digest checked.

gzip with zlib; zstd through the ``zstd`` CLI (Debian's zstd package; the Python stdlib has
no zstd before 3.14 and the venv pins nothing for it): its output is read back here, so the
bound holds against a decompression bomb whatever the tool does.
"""

import subprocess
import threading
import zlib
from typing import IO

from corral_image_service.imports.archive import HashingReader
from corral_image_service.imports.flatten import LayerError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_PIECE = 1 << 20


def sniff(head: bytes) -> str | None:
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


class _Bounded:
    def __init__(self, out: IO[bytes], limit: int, what: str):
        self.out, self.limit, self.what, self.written = out, limit, what, 0

    def write(self, data: bytes) -> None:
        self.written += len(data)
        if self.written > self.limit:
            raise LayerError(f"{self.what} unpacks to more than {self.limit} bytes", "image_too_large")
        self.out.write(data)


def decompress_layer(reader: HashingReader, compression: str | None, out: IO[bytes], limit: int, what: str,
                     zstd: str = "zstd") -> None:
    head = reader.read(4)
    actual = sniff(head)
    if compression is not None and (actual or "tar") != compression:
        raise LayerError(f"{what}: its bytes are not {compression} as its media type says", "invalid_image")
    sink = _Bounded(out, limit, what)
    if actual == "gzip":
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        data = head
        try:
            while data:
                sink.write(inflater.decompress(data, _PIECE))
                while inflater.unconsumed_tail:
                    sink.write(inflater.decompress(inflater.unconsumed_tail, _PIECE))
                data = reader.read(_PIECE)
            sink.write(inflater.flush())
        except zlib.error as exc:
            raise LayerError(f"{what}: corrupt gzip data ({exc})", "invalid_image") from exc
        if not inflater.eof:
            raise LayerError(f"{what}: truncated gzip data", "invalid_image")
    elif actual == "zstd":
        _zstd(reader, head, sink, what, zstd)
    else:
        data = head
        while data:
            sink.write(data)
            data = reader.read(_PIECE)


def _zstd(reader: HashingReader, head: bytes, sink: _Bounded, what: str, zstd: str) -> None:
    try:
        proc = subprocess.Popen([zstd, "-dc", "-q"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except FileNotFoundError as exc:
        raise LayerError(f"{zstd} not found: install zstd to import zstd layers", "unsupported_layer") from exc
    feed_error: list[BaseException] = []

    def feed() -> None:
        try:
            data = head
            while data:
                proc.stdin.write(data)
                data = reader.read(_PIECE)
        except BrokenPipeError:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
            feed_error.append(exc)
        finally:
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        while piece := proc.stdout.read(_PIECE):
            sink.write(piece)
    except BaseException:
        proc.kill()
        raise
    finally:
        feeder.join()
        err = proc.stderr.read()
        proc.wait()
    if feed_error:
        raise feed_error[0]
    if proc.returncode != 0:
        raise LayerError(f"{what}: corrupt zstd data ({err.decode(errors='replace').strip()[-200:]})", "invalid_image")
