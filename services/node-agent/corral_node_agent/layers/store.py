"""Where a layer's bytes are on this node: a verified blob, or the FUSE file of a lazily
loaded layer.

blobs/<hex>          verified blob (eager; downloaded to <hex>.part, checked, renamed)

In ``lazy`` mode a layer is prepared by ``LazyLoader`` and downloaded whole only when that
cannot be done; in ``eager`` mode it is always downloaded whole and sha256-checked before
its first mount. Either way there is one download or preparation per digest however many
sandboxes want it at once. Blobs stay until an operator removes them.
"""

import asyncio
import hashlib
import os
from collections.abc import Callable

from corral_common.contracts.images import ImageServiceClient, ImageServiceUnreachable, UnexpectedStatus, digest_hex
from corral_common.logging import get_logger
from corral_node_agent.errors import ImageUnavailable
from corral_node_agent.layers.lazy.loader import LazyLoader
from corral_node_agent.layers.single_flight import SingleFlight

log = get_logger(__name__)


class BlobStore:
    def __init__(self, root: str, client: ImageServiceClient, lazy: LazyLoader, *, mode: str):
        self.dir = f"{root}/blobs"
        os.makedirs(self.dir, exist_ok=True)
        self.client = client
        self.lazy = lazy
        self.mode = mode
        self._preparing = SingleFlight()

    def path(self, digest: str) -> str:
        return f"{self.dir}/{digest_hex(digest)}"

    def source_path(self, digest: str) -> str:
        """The file EROFS is mounted from: the whole blob if present, else the lazy file."""
        if digest in self.lazy.indexes and not os.path.exists(self.path(digest)):
            return self.lazy.path(digest)
        return self.path(digest)

    async def ensure(self, digests: list[str]) -> list[str]:
        """Make every layer's blob present locally; returns blob paths in the given order."""
        return list(await asyncio.gather(*(self._ensure_one(d) for d in digests)))

    async def _ensure_one(self, digest: str) -> str:
        path = self.path(digest)
        if os.path.exists(path):  # noqa: ASYNC240 - one local stat
            return path
        if digest in self.lazy.indexes:
            return self.lazy.path(digest)
        return await self._preparing.run(digest, lambda: self._obtain(digest))

    async def _obtain(self, digest: str) -> str:
        if self.mode == "lazy":
            lazy_path = await self.lazy.prepare(digest)
            if lazy_path is not None:
                return lazy_path
        return await self.download(digest, self.path(digest))

    async def download(self, digest: str, path: str, verify: Callable[[str], None] | None = None) -> str:
        """Download a blob to ``path`` (via ``path.part``, sha256-checked, then ``verify(part)``
        in a worker thread if given, made read-only and renamed into place)."""
        part = f"{path}.part"
        want = digest_hex(digest)
        h = hashlib.sha256()
        size = 0
        fh = await asyncio.to_thread(open, part, "wb")

        async def write(piece: bytes) -> None:
            nonlocal size
            h.update(piece)
            await asyncio.to_thread(fh.write, piece)
            size += len(piece)

        try:
            try:
                await self.client.download_blob(digest, write)
                await asyncio.to_thread(fh.flush)
                await asyncio.to_thread(os.fsync, fh.fileno())
            finally:
                fh.close()
            if h.hexdigest() != want:
                raise ImageUnavailable(f"blob {digest}: content hash mismatch ({h.hexdigest()})")
            if verify is not None:
                await asyncio.to_thread(verify, part)
            os.chmod(part, 0o444)
            os.rename(part, path)
        except UnexpectedStatus as exc:
            raise ImageUnavailable(f"blob {digest}: {exc}") from exc
        except ImageServiceUnreachable as exc:
            raise ImageUnavailable(f"blob {digest}: download failed: {exc.cause}") from exc
        finally:
            if os.path.exists(part):  # noqa: ASYNC240 - one local stat
                os.unlink(part)
        log.info("layer.downloaded", digest=digest, bytes=size)
        return path

    def cleanup_orphans(self) -> None:
        """Drop the partial downloads a previous run left."""
        for name in os.listdir(self.dir):
            if name.endswith(".part"):
                os.unlink(f"{self.dir}/{name}")
