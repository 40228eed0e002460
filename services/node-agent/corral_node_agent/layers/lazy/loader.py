"""Lazily loaded layers: their chunk indexes, the FUSE file each is read from, and the thread
that fetches chunks for it.

Only the layer's chunk index is fetched before start (plus the chunk holding the EROFS
superblock); the layer is a file of a FUSE filesystem run by this process (``lazyfs``)
whose reads fetch missing chunks on demand into the node-wide chunk cache (``chunks``), and
EROFS is mounted straight from that file. A blob image-service has no index for, or a node
without FUSE, is downloaded whole instead (``prepare`` answers None).

lazy/<hex>           FUSE file of a lazily loaded layer (one FUSE mount for all layers)
chunks/<2 hex>/<hex> verified chunks (node-wide, deduplicated, LRU-bounded)

FUSE reads arrive on worker threads and must never wait on the agent's event loop (which
may itself be reading a layer): chunks are fetched on a private event loop in a thread of
its own, with its own HTTP client. The machinery starts with the first lazily loaded layer.
"""

import asyncio
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx

from corral_common.contracts.images import (
    ImageServiceClient,
    ImageServiceUnreachable,
    MalformedReply,
    UnexpectedStatus,
    digest_hex,
)
from corral_common.logging import get_logger
from corral_node_agent import host
from corral_node_agent.errors import ImageUnavailable
from corral_node_agent.layers.lazy.chunks import ChunkCache, ChunkIndex, ChunkUnavailable
from corral_node_agent.layers.lazy.lazyfs import LayerFile, LazyFS
from corral_node_agent.settings import LayerSettings

log = get_logger(__name__)

_START_LOCK = threading.Lock()


class LazyLoader:
    def __init__(self, root: str, client: ImageServiceClient, settings: LayerSettings, *,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.dir = f"{root}/lazy"
        self.client = client
        self.settings = settings
        self.transport = transport
        self.fetch_deadline_s = settings.fetch_deadline_s
        self.chunks = ChunkCache(f"{root}/chunks", self._fetch_chunk_blocking,
                                 max_bytes=settings.cache_mb * 1024 * 1024, deadline_s=self.fetch_deadline_s)
        self.indexes: dict[str, ChunkIndex] = {}  # digest -> index, for lazily loaded layers
        self.faults: dict[str, str] = {}  # digest -> last read error of a lazily loaded layer
        self._fault_listeners: list[Callable[[str, str], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fs: LazyFS | None = None
        self._fetch_loop: asyncio.AbstractEventLoop | None = None
        self._fetch_thread: threading.Thread | None = None
        self._fetch_client: ImageServiceClient | None = None

    def path(self, digest: str) -> str:
        return f"{self.dir}/{digest_hex(digest)}"

    def add_fault_listener(self, callback: Callable[[str, str], None]) -> None:
        """Call ``callback(layer_digest, error)`` on the event loop when a read of a lazily
        loaded layer fails for good (image-service unreachable past the deadline): the
        sandboxes using that layer should be failed with ``image_unavailable``."""
        self._fault_listeners.append(callback)

    # ---- preparing a layer --------------------------------------------------------------

    async def prepare(self, digest: str) -> str | None:
        """The layer's FUSE file, ready to mount; None when it must be downloaded whole
        (image-service has no index for it, or this node has no FUSE)."""
        index = await self._fetch_index(digest)
        if index is None:
            return None
        self._loop = asyncio.get_running_loop()
        try:
            await asyncio.to_thread(self._start)
        except OSError as exc:
            # No FUSE here (no /dev/fuse, not root, ...): still serve the layer, eagerly.
            log.warning("layer.lazy_unavailable", error=str(exc))
            return None
        self._fs.add(digest_hex(digest), index.size, index)  # type: ignore[union-attr]
        try:
            # Mounting reads the superblock: have its chunk before start, so a sandbox is
            # refused up front (image_unavailable) when image-service cannot serve it.
            await asyncio.to_thread(self.chunks.get, index, 0)
        except OSError as exc:
            raise ImageUnavailable(f"layer {digest}: {exc.strerror or exc}") from exc
        self.indexes[digest] = index
        log.info("layer.indexed", digest=digest, bytes=index.size, chunks=len(index.chunks))
        return self.path(digest)

    async def _fetch_index(self, digest: str) -> ChunkIndex | None:
        """The blob's chunk index, or None when image-service has none (404)."""
        deadline = time.monotonic() + self.fetch_deadline_s
        delay = 0.05
        while True:
            try:
                wire = await self.client.chunk_index(digest)
                return ChunkIndex(digest=digest, size=wire.size, chunk_size=wire.chunk_size,
                                  chunks=tuple(digest_hex(c) for c in wire.chunks))
            except UnexpectedStatus as exc:
                if exc.status_code in (404, 405):
                    return None
                why = str(exc)
            except ImageServiceUnreachable as exc:
                why = f"{type(exc.cause).__name__}: {exc.cause}"
            except MalformedReply as exc:
                raise ImageUnavailable(f"blob {digest}: malformed chunk index") from exc
            if time.monotonic() + delay > deadline:
                raise ImageUnavailable(f"blob {digest}: chunk index unavailable: {why}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _start(self) -> None:
        # Blocking, idempotent; runs in a worker thread (concurrent callers are serialised).
        with _START_LOCK:
            if self._fs is not None:
                return
            if self._fetch_loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                t = threading.Thread(target=run, name="corral-chunk-fetch", daemon=True)
                t.start()
                ready.wait()
                self._fetch_loop, self._fetch_thread = loop, t
                deadline = self.fetch_deadline_s
                self._fetch_client = ImageServiceClient(
                    self.settings.image_service_url, internal_token=self.settings.internal_token,
                    transport=self.transport, timeout=httpx.Timeout(min(10.0, deadline), connect=min(2.0, deadline)),
                    limits=httpx.Limits(max_connections=32, max_keepalive_connections=16))
            fs = LazyFS(self.dir, self._read, workers=16)
            host.umount_tree(self.dir)
            fs.start()
            self._fs = fs

    # ---- reads (FUSE worker threads) ----------------------------------------------------

    def _fetch_chunk_blocking(self, hexd: str) -> bytes:
        """One attempt, from a FUSE worker thread: runs on the fetch loop, never the agent's."""
        loop = self._fetch_loop
        if loop is None or loop.is_closed():
            raise OSError("chunk fetcher stopped")
        fut = asyncio.run_coroutine_threadsafe(self._fetch_client.chunk(f"sha256:{hexd}"), loop)  # type: ignore[union-attr]
        try:
            return fut.result(timeout=self.fetch_deadline_s + 5)
        except BaseException:
            fut.cancel()
            raise

    def _read(self, f: LayerFile, offset: int, size: int) -> bytes:
        index: ChunkIndex = f.index
        try:
            return self.chunks.read(index, offset, size)
        except ChunkUnavailable as exc:
            self._report_fault(index.digest, str(exc))
            raise

    def _report_fault(self, digest: str, error: str) -> None:
        self.faults[digest] = error
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        for cb in self._fault_listeners:
            try:
                loop.call_soon_threadsafe(cb, digest, error)
            except RuntimeError:
                pass

    # ---- mounts and pins ----------------------------------------------------------------

    def mount(self, digest: str, mnt: str) -> None:
        """Mount a lazily loaded layer, read its top-level directory and pin its chunks
        (blocking).

        The top level (a few chunks) is what the agent itself looks up while it assembles
        a sandbox (overlay mount, /home), sometimes from its event loop: fetched here, in
        a worker thread, those lookups never wait on the network.
        """
        host.mount_erofs(self.path(digest), mnt)
        try:
            for name in os.listdir(mnt):
                os.lstat(f"{mnt}/{name}")
        except OSError:
            host.umount(mnt)
            raise
        index = self.indexes[digest]
        self.chunks.pin(index)
        if self.settings.prefetch:
            threading.Thread(target=self.chunks.prefetch, args=(index,), daemon=True,
                             name="corral-chunk-prefetch").start()

    def pin(self, digest: str) -> None:
        """Keep the layer's chunks in the cache until ``unpin``."""
        self.chunks.pin(self.indexes[digest])

    def unpin(self, digest: str) -> None:
        self.chunks.unpin(self.indexes[digest])

    def fill(self, digest: str) -> None:
        """Fetch every chunk of the layer not cached yet, in parallel (blocking)."""
        index = self.indexes[digest]
        missing = [i for i, h in enumerate(index.chunks) if not self.chunks.cached(h)]
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="corral-chunk-fill") as pool:
            for _ in pool.map(lambda i: self.chunks.get(index, i), missing):
                pass

    # ---- lifecycle ----------------------------------------------------------------------

    def cleanup_orphans(self) -> None:
        """Drop the FUSE mount a previous run left (after the layer mounts that hold its files)."""
        if self._fs is None and os.path.isdir(self.dir):
            host.umount_tree(self.dir)

    def stop(self, detach: Callable[[str], None]) -> None:
        """Stop the FUSE filesystem and the chunk fetcher (blocking, idempotent)."""
        self.chunks.stopping.set()
        if self._fs is not None:
            # Layers still mounted from it (sandboxes still running) are detached with it
            # (``detach(digest)``) and read EIO from now on: nothing is left mounted, nothing hangs.
            for digest in list(self.indexes):
                detach(digest)
            self._fs.stop()
            self._fs = None
        if self._fetch_loop is not None:
            loop = self._fetch_loop
            if self._fetch_client is not None:
                asyncio.run_coroutine_threadsafe(self._fetch_client.aclose(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            self._fetch_thread.join(timeout=10)  # type: ignore[union-attr]
            loop.close()
            self._fetch_loop = None
