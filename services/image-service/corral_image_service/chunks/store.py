"""Content-addressed chunk store and per-blob chunk indexes.

Every layer blob is cut into fixed-size chunks (``chunk_size``, a multiple of the 4 KiB
EROFS block); each chunk is stored once under its own sha256, so identical chunks shared
by layers or versions (a common base, an unchanged file region) take space once. A blob's
index lists its chunk digests in order; chunk ``i`` covers bytes
``[i * chunk_size, min(size, (i + 1) * chunk_size))``.

The store is a small interface (``ChunkStore``). The default, ``LocalChunkStore``, is a
directory: point it at a shared POSIX filesystem mounted on every image-service replica
for a multi-node deployment. Writes go to a temp file in the destination directory and
are renamed into place, so concurrent writers (even on other hosts) and readers never see
a partial chunk or index; the same name always means the same bytes.
"""

import hashlib
import json
import os
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from corral_image_service.blobs.schemas import DIGEST_RE

EROFS_BLOCK = 4096


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class ChunkStore(ABC):
    """Where chunks and indexes live. Implementations must be safe for concurrent writers."""

    @abstractmethod
    def has_chunk(self, digest: str) -> bool: ...

    @abstractmethod
    def put_chunk(self, digest: str, data: bytes) -> bool:
        """Store the chunk unless present; True when it was new."""

    @abstractmethod
    def chunk_path(self, digest: str) -> Path | None:
        """A local file holding the chunk (served with sendfile), or None if absent."""

    @abstractmethod
    def get_index(self, blob_digest: str) -> dict[str, Any] | None: ...

    @abstractmethod
    def put_index(self, blob_digest: str, index: dict[str, Any]) -> None: ...


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o444)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class LocalChunkStore(ChunkStore):
    """``<root>/sha256/<2 hex>/<hex>`` chunks, ``<root>/indexes/sha256/<hex>.json`` indexes."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.chunks = self.root / "sha256"
        self.indexes = self.root / "indexes" / "sha256"

    def ensure_dirs(self) -> None:
        self.chunks.mkdir(parents=True, exist_ok=True)
        self.indexes.mkdir(parents=True, exist_ok=True)

    def _path(self, digest: str) -> Path:
        if not DIGEST_RE.match(digest):
            raise ValueError(f"malformed digest {digest!r}")
        hexd = digest[7:]
        return self.chunks / hexd[:2] / hexd

    def has_chunk(self, digest: str) -> bool:
        return self._path(digest).is_file()

    def put_chunk(self, digest: str, data: bytes) -> bool:
        path = self._path(digest)
        if path.is_file():
            return False
        _atomic_write(path, data)
        return True

    def chunk_path(self, digest: str) -> Path | None:
        path = self._path(digest)
        return path if path.is_file() else None

    def _index_path(self, blob_digest: str) -> Path:
        if not DIGEST_RE.match(blob_digest):
            raise ValueError(f"malformed digest {blob_digest!r}")
        return self.indexes / f"{blob_digest[7:]}.json"

    def get_index(self, blob_digest: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._index_path(blob_digest).read_bytes())
        except FileNotFoundError:
            return None

    def put_index(self, blob_digest: str, index: dict[str, Any]) -> None:
        _atomic_write(self._index_path(blob_digest), json.dumps(index, separators=(",", ":")).encode())


def chunk_blob(store: ChunkStore, blob_digest: str, blob_path: str | Path, chunk_size: int) -> tuple[dict, int]:
    """Split a blob into chunks, store the new ones, write and return its index.

    Returns (index, number of chunks that were new to the store). Blocking: run in a thread.
    """
    if chunk_size <= 0 or chunk_size % EROFS_BLOCK:
        raise ValueError(f"chunk_size must be a positive multiple of {EROFS_BLOCK}")
    digests: list[str] = []
    new = 0
    size = 0
    whole = hashlib.sha256()
    with open(blob_path, "rb") as fh:
        while data := fh.read(chunk_size):
            whole.update(data)
            size += len(data)
            d = sha256_digest(data)
            new += store.put_chunk(d, data)
            digests.append(d)
    if f"sha256:{whole.hexdigest()}" != blob_digest:
        raise ValueError(f"blob {blob_digest} does not match its content")
    index = {"digest": blob_digest, "size": size, "chunk_size": chunk_size, "chunks": digests}
    store.put_index(blob_digest, index)
    return index, new
