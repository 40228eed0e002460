"""Node-local cache of EROFS layers and their shared read-only mounts.

Two modes (``CORRAL_NODE_LAYER_MODE``):

- ``eager``: the whole blob is downloaded and sha256-checked before the first mount.
- ``lazy`` (default): only the layer's chunk index is fetched before start (plus the chunk
  holding the EROFS superblock); the layer is a file of a FUSE filesystem run by this
  process (``lazyfs``) whose reads fetch missing chunks on demand into the node-wide chunk
  cache (``chunks``), and EROFS is mounted straight from that file. A blob image-service
  has no index for falls back to the eager path.

blobs/<hex>          verified blob (eager; downloaded to <hex>.part, checked, renamed)
chunks/<2 hex>/<hex> verified chunks (lazy; node-wide, deduplicated, LRU-bounded)
lazy/<hex>           FUSE file of a lazily loaded layer (one FUSE mount for all layers)
mnt/<hex>            EROFS mount of the layer, shared by every sandbox using it;
                     refcounted, unmounted when its last sandbox goes (after an idle delay)
"""

import asyncio
import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from corral_common.errors import CorralError, NotFound
from corral_common.internal import INTERNAL_TOKEN_HEADER
from corral_common.logging import get_logger

from .. import host
from .chunks import ChunkCache, ChunkIndex, ChunkUnavailable
from .lazyfs import LayerFile, LazyFS

log = get_logger(__name__)

DIGEST_RE = re.compile(r"^sha256:([0-9a-f]{64})$")

ENVIRONMENT_TTL_S = 60.0
LAYER_IDLE_UNMOUNT_S = 30.0
MODES = ("lazy", "eager")


def _node_settings() -> Any:
    from ..settings import NodeAgentSettings

    try:
        return NodeAgentSettings()
    except Exception:  # noqa: BLE001 - unrelated bad settings must not break the defaults
        return NodeAgentSettings.model_construct()


class ImageUnavailable(CorralError):
    """The environment or one of its layers cannot be obtained (→ failed(image_unavailable))."""

    status_code = 502
    code = "image_unavailable"


class EnvironmentNotFound(ImageUnavailable, NotFound):
    status_code = 404
    code = "environment_not_found"


def _digest_of(layer: Mapping[str, Any] | Any) -> str:
    digest = layer.get("digest") if isinstance(layer, Mapping) else getattr(layer, "digest", None)
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise ImageUnavailable(f"invalid layer digest {digest!r}")
    return digest


def _parse_index(digest: str, raw: Any) -> ChunkIndex:
    try:
        size, chunk_size, chunks = int(raw["size"]), int(raw["chunk_size"]), list(raw["chunks"])
        ok = (raw["digest"] == digest and size > 0 and chunk_size > 0 and chunk_size % 4096 == 0
              and len(chunks) == -(-size // chunk_size) and all(DIGEST_RE.match(c) for c in chunks))
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise ImageUnavailable(f"blob {digest}: malformed chunk index")
    return ChunkIndex(digest=digest, size=size, chunk_size=chunk_size, chunks=tuple(c[7:] for c in chunks))


_START_LOCK = threading.Lock()


class LayerCache:
    def __init__(self, state_dir: str, image_service_url: str, *, internal_token: str = "",
                 transport: httpx.AsyncBaseTransport | None = None, timeout_s: float = 300.0,
                 mode: str | None = None, cache_max_mb: int | None = None,
                 fetch_deadline_s: float | None = None, prefetch: bool | None = None):
        if None in (mode, cache_max_mb, fetch_deadline_s, prefetch):
            cfg = _node_settings()
            mode = mode or cfg.layer_mode
            cache_max_mb = cfg.layer_cache_mb if cache_max_mb is None else cache_max_mb
            fetch_deadline_s = cfg.layer_fetch_deadline_s if fetch_deadline_s is None else fetch_deadline_s
            prefetch = cfg.layer_prefetch if prefetch is None else prefetch
        if mode not in MODES:
            raise ValueError(f"layer mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self.root = os.path.join(os.path.abspath(state_dir), "layers")
        self.blob_dir = f"{self.root}/blobs"
        self.mnt_dir = f"{self.root}/mnt"
        self.chunk_dir = f"{self.root}/chunks"
        self.lazy_dir = f"{self.root}/lazy"
        os.makedirs(self.blob_dir, exist_ok=True)
        os.makedirs(self.mnt_dir, exist_ok=True)
        self.base_url = image_service_url.rstrip("/")
        headers = {INTERNAL_TOKEN_HEADER: internal_token} if internal_token else {}
        self._headers = headers
        self._transport = transport
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers, transport=transport,
                                         timeout=httpx.Timeout(timeout_s, connect=10.0))
        self.fetch_deadline_s = float(fetch_deadline_s)
        self.prefetch = bool(prefetch)
        # Lazy machinery, started on the first lazily loaded layer.
        self.chunks = ChunkCache(self.chunk_dir, self._fetch_chunk_blocking,
                                 max_bytes=int(cache_max_mb) * 1024 * 1024, deadline_s=self.fetch_deadline_s)
        self._fs: LazyFS | None = None
        self._fetch_loop: asyncio.AbstractEventLoop | None = None
        self._fetch_thread: threading.Thread | None = None
        self._fetch_client: httpx.AsyncClient | None = None
        self._indexes: dict[str, ChunkIndex] = {}  # digest -> index, for lazily loaded layers
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fault_listeners: list[Callable[[str, str], None]] = []
        self.faults: dict[str, str] = {}  # digest -> last read error of a lazily loaded layer
        self._downloads: dict[str, asyncio.Future[str]] = {}
        self._refs: dict[str, int] = {}
        self._idle_unmounts: dict[str, asyncio.TimerHandle] = {}
        self._environments: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._mount_lock = asyncio.Lock()
        self._pinned: set[str] = set()  # lazily loaded layers mounted now (chunks pinned)

    async def aclose(self) -> None:
        for digest in list(self._idle_unmounts):
            self._idle_unmounts.pop(digest).cancel()
            self._unmount_if_idle(digest)
        await self._client.aclose()
        await asyncio.to_thread(self._stop_lazy)

    def _stop_lazy(self) -> None:
        self.chunks.stopping.set()
        if self._fs is not None:
            # Layers still mounted from it (sandboxes still running) are detached with it
            # and read EIO from now on: nothing is left mounted, nothing hangs.
            for d in list(self._indexes):
                mnt = self.mount_path(d)
                if host.is_mountpoint(mnt):
                    host.umount(mnt)
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

    def add_fault_listener(self, callback: Callable[[str, str], None]) -> None:
        """Call ``callback(layer_digest, error)`` on the event loop when a read of a lazily
        loaded layer fails for good (image-service unreachable past the deadline): the
        sandboxes using that layer should be failed with ``image_unavailable``."""
        self._fault_listeners.append(callback)

    def blob_path(self, digest: str) -> str:
        return f"{self.blob_dir}/{DIGEST_RE.match(digest).group(1)}"  # type: ignore[union-attr]

    def mount_path(self, digest: str) -> str:
        return f"{self.mnt_dir}/{DIGEST_RE.match(digest).group(1)}"  # type: ignore[union-attr]

    def lazy_path(self, digest: str) -> str:
        return f"{self.lazy_dir}/{DIGEST_RE.match(digest).group(1)}"  # type: ignore[union-attr]

    def source_path(self, digest: str) -> str:
        """The file EROFS is mounted from: the whole blob if present, else the lazy file."""
        if digest in self._indexes and not os.path.exists(self.blob_path(digest)):
            return self.lazy_path(digest)
        return self.blob_path(digest)

    # ---- image-service ------------------------------------------------------------------

    async def resolve_environment(self, name: str) -> list[dict[str, Any]]:
        """Layers of an environment, base first (as image-service returns them).

        An environment's layers never change (image-service answers 409 to a redefinition),
        so answers are cached briefly: a burst of creates asks image-service once.
        """
        cached = self._environments.get(name)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        try:
            resp = await self._client.get(f"/v1/environments/{quote(name, safe='')}")
        except httpx.HTTPError as exc:
            raise ImageUnavailable(f"image-service unreachable: {exc}") from exc
        if resp.status_code == 404:
            raise EnvironmentNotFound(f"environment {name!r} not found", loc=["body", "environment"])
        if resp.status_code != 200:
            raise ImageUnavailable(f"image-service answered {resp.status_code} for environment {name!r}")
        layers = resp.json().get("layers") or []
        if not layers:
            raise ImageUnavailable(f"environment {name!r} has no layers")
        self._environments[name] = (time.monotonic() + ENVIRONMENT_TTL_S, layers)
        return layers

    # ---- blobs --------------------------------------------------------------------------

    async def ensure(self, layers: Iterable[Mapping[str, Any] | Any]) -> list[str]:
        """Make every layer's blob present locally; returns blob paths in the given order."""
        digests = [_digest_of(layer) for layer in layers]
        return list(await asyncio.gather(*(self._ensure_one(d) for d in digests)))

    async def _ensure_one(self, digest: str) -> str:
        path = self.blob_path(digest)
        if os.path.exists(path):
            return path
        if digest in self._indexes:
            return self.lazy_path(digest)
        fut = self._downloads.get(digest)
        if fut is None:
            # One download per digest however many sandboxes want it at once.
            work = self._prepare_lazy(digest) if self.mode == "lazy" else self._download(digest, path)
            fut = asyncio.ensure_future(work)
            self._downloads[digest] = fut
            fut.add_done_callback(lambda _f: self._downloads.pop(digest, None))
        # shield: one waiter being cancelled must not cancel the download for the others.
        return await asyncio.shield(fut)

    async def _download(self, digest: str, path: str) -> str:
        part = f"{path}.part"
        want = DIGEST_RE.match(digest).group(1)  # type: ignore[union-attr]
        h = hashlib.sha256()
        size = 0
        try:
            async with self._client.stream("GET", f"/v1/blobs/{digest}") as resp:
                if resp.status_code != 200:
                    raise ImageUnavailable(f"blob {digest}: image-service answered {resp.status_code}")
                fh = await asyncio.to_thread(open, part, "wb")
                try:
                    async for chunk in resp.aiter_bytes(1 << 20):
                        h.update(chunk)
                        await asyncio.to_thread(fh.write, chunk)
                        size += len(chunk)
                    await asyncio.to_thread(fh.flush)
                    await asyncio.to_thread(os.fsync, fh.fileno())
                finally:
                    fh.close()
            if h.hexdigest() != want:
                raise ImageUnavailable(f"blob {digest}: content hash mismatch ({h.hexdigest()})")
            os.chmod(part, 0o444)
            os.rename(part, path)
        except httpx.HTTPError as exc:
            raise ImageUnavailable(f"blob {digest}: download failed: {exc}") from exc
        finally:
            if os.path.exists(part):
                os.unlink(part)
        log.info("layer_downloaded", digest=digest, bytes=size)
        return path

    # ---- lazy layers --------------------------------------------------------------------

    async def _fetch_index(self, digest: str) -> Any | None:
        """The blob's chunk index, or None when image-service has none (404)."""
        deadline = time.monotonic() + self.fetch_deadline_s
        delay = 0.05
        while True:
            try:
                resp = await self._client.get(f"/v1/indexes/{digest}")
                if resp.status_code == 200:
                    return resp.json()
                if resp.status_code in (404, 405):
                    return None
                why = f"image-service answered {resp.status_code}"
            except (httpx.HTTPError, ValueError) as exc:
                why = f"{type(exc).__name__}: {exc}"
            if time.monotonic() + delay > deadline:
                raise ImageUnavailable(f"blob {digest}: chunk index unavailable: {why}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _prepare_lazy(self, digest: str) -> str:
        raw = await self._fetch_index(digest)
        if raw is None:
            return await self._download(digest, self.blob_path(digest))
        index = _parse_index(digest, raw)
        self._loop = asyncio.get_running_loop()
        try:
            await asyncio.to_thread(self._start_lazy)
        except OSError as exc:
            # No FUSE here (no /dev/fuse, not root, ...): still serve the layer, eagerly.
            log.warning("lazy_layers_unavailable", error=str(exc))
            return await self._download(digest, self.blob_path(digest))
        self._fs.add(DIGEST_RE.match(digest).group(1), index.size, index)  # type: ignore[union-attr]
        try:
            # Mounting reads the superblock: have its chunk before start, so a sandbox is
            # refused up front (image_unavailable) when image-service cannot serve it.
            await asyncio.to_thread(self.chunks.get, index, 0)
        except OSError as exc:
            raise ImageUnavailable(f"layer {digest}: {exc.strerror or exc}") from exc
        self._indexes[digest] = index
        log.info("layer_indexed", digest=digest, bytes=index.size, chunks=len(index.chunks))
        return self.lazy_path(digest)

    def _start_lazy(self) -> None:
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
                self._fetch_client = httpx.AsyncClient(
                    base_url=self.base_url, headers=self._headers, transport=self._transport,
                    timeout=httpx.Timeout(min(10.0, self.fetch_deadline_s), connect=min(2.0, self.fetch_deadline_s)),
                    limits=httpx.Limits(max_connections=32, max_keepalive_connections=16))
            fs = LazyFS(self.lazy_dir, self._read_lazy, workers=16)
            host.umount_tree(self.lazy_dir)
            fs.start()
            self._fs = fs

    async def _get_chunk(self, hexd: str) -> bytes:
        resp = await self._fetch_client.get(f"/v1/chunks/sha256:{hexd}")  # type: ignore[union-attr]
        if resp.status_code != 200:
            raise OSError(f"image-service answered {resp.status_code}")
        return resp.content

    def _fetch_chunk_blocking(self, hexd: str) -> bytes:
        """One attempt, from a FUSE worker thread: runs on the fetch loop, never the agent's."""
        loop = self._fetch_loop
        if loop is None or loop.is_closed():
            raise OSError("chunk fetcher stopped")
        fut = asyncio.run_coroutine_threadsafe(self._get_chunk(hexd), loop)
        try:
            return fut.result(timeout=self.fetch_deadline_s + 5)
        except BaseException:
            fut.cancel()
            raise

    def _read_lazy(self, f: LayerFile, offset: int, size: int) -> bytes:
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

    # ---- mounts -------------------------------------------------------------------------

    async def acquire(self, layers: Iterable[Mapping[str, Any] | Any]) -> list[str]:
        """Ensure and mount the layers, taking one reference each; returns mount dirs in the
        given order. Pair with release(same layers)."""
        layers = list(layers)
        await self.ensure(layers)
        digests = [_digest_of(layer) for layer in layers]
        taken: list[str] = []
        async with self._mount_lock:
            try:
                for d in digests:
                    idle = self._idle_unmounts.pop(d, None)
                    if idle is not None:
                        idle.cancel()
                    if self._refs.get(d, 0) == 0:
                        mnt = self.mount_path(d)
                        os.makedirs(mnt, exist_ok=True)
                        if not host.is_mountpoint(mnt):
                            src = self.source_path(d)
                            if d in self._indexes and src == self.lazy_path(d):
                                # Reads go through our FUSE workers: keep them off the loop.
                                await asyncio.to_thread(self._mount_lazy, d, src, mnt)
                            else:
                                host.mount_erofs(src, mnt)
                    self._refs[d] = self._refs.get(d, 0) + 1
                    taken.append(d)
            except OSError as exc:
                self._release_locked(taken)
                raise ImageUnavailable(f"cannot mount layer: {exc}") from exc
        return [self.mount_path(d) for d in digests]

    async def release(self, layers: Iterable[Mapping[str, Any] | Any]) -> None:
        digests = [_digest_of(layer) for layer in layers]
        async with self._mount_lock:
            self._release_locked(digests)

    def _release_locked(self, digests: list[str]) -> None:
        for d in digests:
            n = self._refs.get(d, 0) - 1
            if n > 0:
                self._refs[d] = n
                continue
            self._refs.pop(d, None)
            # Keep an unused layer mounted a while: the next sandbox of the same environment
            # (the common case in a batch) then needs no mount.
            previous = self._idle_unmounts.pop(d, None)
            if previous is not None:
                previous.cancel()
            self._idle_unmounts[d] = asyncio.get_running_loop().call_later(
                LAYER_IDLE_UNMOUNT_S, self._unmount_if_idle, d)

    def _mount_lazy(self, digest: str, src: str, mnt: str) -> None:
        """Mount a lazily loaded layer and read its top-level directory (blocking).

        The top level (a few chunks) is what the agent itself looks up while it assembles
        a sandbox (overlay mount, /home), sometimes from its event loop: fetched here, in
        a worker thread, those lookups never wait on the network.
        """
        host.mount_erofs(src, mnt)
        try:
            for name in os.listdir(mnt):
                os.lstat(f"{mnt}/{name}")
        except OSError:
            host.umount(mnt)
            raise
        index = self._indexes[digest]
        self.chunks.pin(index)
        self._pinned.add(digest)
        if self.prefetch:
            threading.Thread(target=self.chunks.prefetch, args=(index,), daemon=True,
                             name="corral-chunk-prefetch").start()

    def _unmount_if_idle(self, digest: str) -> None:
        self._idle_unmounts.pop(digest, None)
        if self._refs.get(digest, 0) > 0:
            return
        mnt = self.mount_path(digest)
        try:
            host.umount(mnt)
            os.rmdir(mnt)
        except OSError:
            log.exception("layer_umount_failed", digest=digest)
        if digest in self._pinned:
            self._pinned.discard(digest)
            self.chunks.unpin(self._indexes[digest])

    def refcount(self, digest: str) -> int:
        return self._refs.get(digest, 0)

    def cleanup_orphans(self) -> None:
        """Drop mounts and partial downloads a previous run left (refs start at zero)."""
        if self._fs is None and os.path.isdir(self.lazy_dir):
            # Layer mounts first (they hold the FUSE file), then a stale FUSE mount.
            for name in os.listdir(self.mnt_dir):
                host.umount_tree(f"{self.mnt_dir}/{name}")
            host.umount_tree(self.lazy_dir)
        for name in os.listdir(self.mnt_dir):
            path = f"{self.mnt_dir}/{name}"
            host.umount_tree(path)
            try:
                os.rmdir(path)
            except OSError:
                pass
        for name in os.listdir(self.blob_dir):
            if name.endswith(".part"):
                os.unlink(f"{self.blob_dir}/{name}")
