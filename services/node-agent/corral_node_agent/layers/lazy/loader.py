"""Lazily loaded layers: their chunk indexes and the FUSE file each is read from.

Only the layer's chunk index is fetched before start (plus the chunk holding the EROFS
superblock); the layer is a file of the lazy-layer server (``server``, a process of its own
that outlives agent restarts) whose reads fetch missing chunks on demand into the node-wide
chunk cache (``chunks``), and EROFS is mounted straight from that file. A blob image-service
has no index for, or a node without FUSE, is downloaded whole instead (``prepare`` answers
None).

lazy/<hex>           FUSE file of a lazily loaded layer, in the server's mount namespace:
                     reached from ours as /proc/<server pid>/root/<layers>/lazy/<hex>
chunks/<2 hex>/<hex> verified chunks (node-wide, deduplicated, LRU-bounded; the server's)

The server pins a layer's chunks while its file is open (mounted) and stops by itself once
no agent is connected and no file is open: nothing here pins, unmounts or kills on
shutdown, so an agent restart cannot race what its successor adopts.
"""

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable

from corral_common.contracts.images import (
    ImageServiceClient,
    ImageServiceUnreachable,
    MalformedReply,
    UnexpectedStatus,
    digest_hex,
)
from corral_common.logging import get_logger
from corral_host import mounts
from corral_node_agent.errors import ImageUnavailable
from corral_node_agent.layers.lazy.chunks import ChunkIndex, ChunkStats
from corral_node_agent.layers.lazy.control import LayerServerClient
from corral_node_agent.settings import LayerSettings

log = get_logger(__name__)


class LazyLoader:
    def __init__(self, root: str, client: ImageServiceClient, settings: LayerSettings):
        self.dir = f"{root}/lazy"
        self.client = client
        self.settings = settings
        self.fetch_deadline_s = settings.fetch_deadline_s
        self.indexes: dict[str, ChunkIndex] = {}  # digest -> index, for lazily loaded layers
        self.faults: dict[str, str] = {}  # digest -> last read error of a lazily loaded layer
        self._fault_listeners: list[Callable[[str, str], None]] = []
        self._exit_listeners: list[Callable[[list[str]], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stats = ChunkStats()
        self.server = LayerServerClient(root, {
            "image_service_url": settings.image_service_url, "internal_token": settings.internal_token,
            "cache_mb": settings.cache_mb, "fetch_deadline_s": settings.fetch_deadline_s,
        }, on_event=self._on_event, on_exit=self._on_server_exit)

    def path(self, digest: str) -> str:
        pid = self.server.pid
        if pid is None:
            return f"{self.dir}/{digest_hex(digest)}"  # no server: names no mountable file
        return f"/proc/{pid}/root{self.dir}/{digest_hex(digest)}"

    def add_fault_listener(self, callback: Callable[[str, str], None]) -> None:
        """Call ``callback(layer_digest, error)`` on the event loop when a read of a lazily
        loaded layer fails for good (image-service unreachable past the deadline, or the
        lazy-layer server died): the sandboxes using that layer should be failed with
        ``image_unavailable``."""
        self._fault_listeners.append(callback)

    def add_exit_listener(self, callback: Callable[[list[str]], None]) -> None:
        """Call ``callback(digests)`` on the event loop when the server behind those layers
        died: their mounts in our namespace read EIO now and must not be shared further."""
        self._exit_listeners.append(callback)

    async def start(self) -> None:
        """Find the running server or start one now (agent start): a restarted agent hears
        of its faults and death at once, and the first lazy layer on a new node does not wait
        for a process to start (~1 s of Python imports on a busy host)."""
        self._loop = asyncio.get_running_loop()
        try:
            await asyncio.to_thread(self.server.ensure)
        except OSError as exc:
            log.warning("layer.lazy_unavailable", error=str(exc))

    # ---- preparing a layer --------------------------------------------------------------

    async def prepare(self, digest: str) -> str | None:
        """The layer's FUSE file, ready to mount; None when it must be downloaded whole
        (image-service has no index for it, or this node has no FUSE)."""
        index = await self._fetch_index(digest)
        if index is None:
            return None
        self._loop = asyncio.get_running_loop()
        try:
            await asyncio.to_thread(self.server.ensure)
        except OSError as exc:
            # No FUSE here (no /dev/fuse, not root, ...): still serve the layer, eagerly.
            log.warning("layer.lazy_unavailable", error=str(exc))
            return None
        try:
            await asyncio.to_thread(self.server.request, "add", timeout=self.fetch_deadline_s + 10,
                                    digest=digest, size=index.size, chunk_size=index.chunk_size,
                                    chunks=list(index.chunks))
        except OSError as exc:
            raise ImageUnavailable(f"layer {digest}: {exc}") from exc
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

    # ---- the server's news (its watch thread) -------------------------------------------

    def _on_event(self, event: dict) -> None:
        if event.get("event") == "fault":
            self._report_fault(event["digest"], event["error"])

    def _report_fault(self, digest: str, error: str) -> None:
        self.faults[digest] = error
        self._call_soon(self._fault_listeners, digest, error)

    def _on_server_exit(self, pid: int) -> None:
        self._call_soon([self._server_gone], pid)

    def _server_gone(self, pid: int) -> None:
        # On the event loop, like every other user of ``indexes``.
        digests = list(self.indexes)
        self.indexes.clear()  # the next sandbox on them prepares them again, on a new server
        for cb in self._exit_listeners:
            cb(digests)
        for digest in digests:
            self._report_fault(digest, f"the lazy-layer server (pid {pid}) exited")

    def _call_soon(self, listeners: list[Callable], *args) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        for cb in listeners:
            try:
                loop.call_soon_threadsafe(cb, *args)
            except RuntimeError:
                pass

    # ---- mounts -------------------------------------------------------------------------

    def mount(self, digest: str, mnt: str) -> None:
        """Mount a lazily loaded layer and read its top-level directory (blocking).

        The top level (a few chunks) is what the agent itself looks up while it assembles
        a sandbox (overlay mount, /home), sometimes from its event loop: fetched here, in
        a worker thread, those lookups never wait on the network.
        """
        mounts.mount_erofs(self.path(digest), mnt)
        try:
            for name in os.listdir(mnt):
                os.lstat(f"{mnt}/{name}")
        except OSError:
            mounts.umount(mnt)
            raise
        if self.settings.prefetch:
            self.server.request("fill", digest=digest, wait=False)

    def fill(self, digest: str) -> None:
        """Fetch every chunk of the layer not cached yet, in parallel (blocking)."""
        self.server.request("fill", timeout=3600, digest=digest, wait=True)

    # ---- what the server holds ----------------------------------------------------------

    def _ask_stats(self) -> dict:
        if self.server.pid is None:
            return {}
        try:
            reply = self.server.request("stats", timeout=2.0)
        except OSError:
            return {}
        fields = dict(reply["stats"])
        fields["fetched_digests"] = Counter(fields.get("fetched_digests", {}))
        self._stats = ChunkStats(**fields)
        return reply["held"]

    def stats(self) -> ChunkStats:
        """The server's chunk counters (since it started; the last known ones when it does
        not answer)."""
        self._ask_stats()
        return self._stats

    def held(self) -> dict[str, int]:
        """Bytes of each lazily loaded layer that sit in the node's chunk cache."""
        return {d: n for d, n in self._ask_stats().items() if d in self.indexes}

    def drop_memory(self) -> None:
        """The server forgets its in-memory chunks and which files it verified (tests)."""
        self.server.request("drop_memory")

    # ---- lifecycle ----------------------------------------------------------------------

    def cleanup_orphans(self) -> None:
        """Drop a FUSE mount an in-process filesystem of an older agent left in our namespace
        (the server's own lives in its namespace, not here).
        compat(64efcf0, 2026-12-02): delete once every node has started an agent at 64efcf0 or
        later (nothing mounts here since)."""
        if os.path.isdir(self.dir):
            mounts.umount_tree(self.dir)

    def stop(self) -> None:
        """Let go of the server (blocking, idempotent): it serves on what is still mounted."""
        self.server.close()
