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
dax/<hex>.erofs      DAX-capable variant of a layer for VMs (uncompressed, 2 MiB-padded;
                     built once per digest from the mounted layer, see ``dax``) + <hex>.json
disks/<hex>          VM disk image (qcow2/raw) from image-service, read-only (0444): a VM
                     boots from a per-sandbox qcow2 overlay on top of it

Containers mount layers (``acquire``); VMs attach layer files as guest disks or map them
with virtio-pmem (``acquire_files``) and may boot a disk image (``acquire_disk_image``).
"""

import asyncio
import contextlib
import hashlib
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import httpx

from corral_common.disk_images import DISK_IMAGE_FORMATS, DiskImageRefused, inspect_disk_image
from corral_common.internal import INTERNAL_TOKEN_HEADER
from corral_common.logging import get_logger
from corral_node_agent.errors import DiskImageNotFound, EnvironmentNotFound, ImageUnavailable

from .. import host
from .chunks import ChunkCache, ChunkIndex, ChunkUnavailable
from .dax import DaxBuildError, build_dax_image, is_trusted
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
                 fetch_deadline_s: float | None = None, prefetch: bool | None = None,
                 mkfs_erofs: str = "mkfs.erofs", qemu_img: str = "qemu-img"):
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
        self.dax_dir = f"{self.root}/dax"
        self.disk_dir = f"{self.root}/disks"
        for d in (self.blob_dir, self.mnt_dir, self.dax_dir, self.disk_dir):
            os.makedirs(d, exist_ok=True)
        self.mkfs_erofs = mkfs_erofs
        self.qemu_img = qemu_img
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
        # Layer files handed to VMs: (digest, dax) -> references.
        self._file_refs: Counter[tuple[str, bool]] = Counter()
        self._file_pinned: set[str] = set()  # lazy layers whose chunks a file reference pins
        self._dax_builds: dict[str, asyncio.Future[str]] = {}
        # Conversions read a whole layer and write it again: one at a time per node.
        self._dax_limiter = asyncio.Semaphore(1)
        self.dax_builds = 0  # conversions done by this process (observability, tests)
        # Disk images: digest -> references; name as acquired -> digests, oldest first.
        self._disk_refs: Counter[str] = Counter()
        self._disk_held: dict[str, list[str]] = {}

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

    async def _download(self, digest: str, path: str, verify: Callable[[str], None] | None = None) -> str:
        """Download a blob to ``path`` (via ``path.part``, sha256-checked, then ``verify(part)``
        in a worker thread if given, made read-only and renamed into place)."""
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
            if verify is not None:
                await asyncio.to_thread(verify, part)
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

    # ---- layer files (VMs) --------------------------------------------------------------

    def dax_path(self, digest: str) -> str:
        return f"{self.dax_dir}/{DIGEST_RE.match(digest).group(1)}.erofs"  # type: ignore[union-attr]

    async def acquire_files(self, layers: Iterable[Mapping[str, Any] | Any], *, dax: bool) -> list[str]:
        """The image file of each layer, in the given order (like ``acquire``), each pinned
        until ``release_files(same layers, dax=same)``.

        - ``dax=False``: the layer's EROFS file as it is (lz4hc-compressed; for virtio-blk).
          Eager: the verified blob. Lazy: the layer's FUSE file, whose reads fetch missing
          chunks on demand; any process of this mount namespace (QEMU started by the agent)
          can open, read and mmap it, and its chunks stay pinned in the cache meanwhile.
        - ``dax=True``: the DAX-capable variant (uncompressed, 2 MiB-padded; see ``dax``),
          built from the mounted layer the first time any sandbox asks for it, then kept
          across sandboxes and agent restarts. Concurrent callers wait for one build.

        Raises ImageUnavailable (nothing is left held then).
        """
        layers = list(layers)
        digests = [_digest_of(layer) for layer in layers]
        # References first: prune_files() never removes what an acquire is still preparing.
        for d in digests:
            self._file_refs[(d, dax)] += 1
        try:
            if dax:
                unique = list(dict.fromkeys(digests))
                built = await asyncio.gather(*(self._ensure_dax(d) for d in unique))
                paths = dict(zip(unique, built, strict=True))
                return [paths[d] for d in digests]
            await self.ensure(layers)
            for d in set(digests):
                if d in self._indexes and not os.path.exists(self.blob_path(d)) and d not in self._file_pinned:
                    self.chunks.pin(self._indexes[d])
                    self._file_pinned.add(d)
            return [self.source_path(d) for d in digests]
        except BaseException:
            self._release_files(digests, dax)
            raise

    async def release_files(self, layers: Iterable[Mapping[str, Any] | Any], *, dax: bool) -> None:
        self._release_files([_digest_of(layer) for layer in layers], dax)

    def _release_files(self, digests: list[str], dax: bool) -> None:
        for d in digests:
            key = (d, dax)
            if self._file_refs[key] > 1:
                self._file_refs[key] -= 1
                continue
            self._file_refs.pop(key, None)
            if not dax and d in self._file_pinned:
                self._file_pinned.discard(d)
                self.chunks.unpin(self._indexes[d])

    def file_refcount(self, digest: str, *, dax: bool) -> int:
        return self._file_refs.get((digest, dax), 0)

    async def _ensure_dax(self, digest: str) -> str:
        path = self.dax_path(digest)
        if is_trusted(path, digest):  # a stat and a small read: fine on the loop
            return path
        fut = self._dax_builds.get(digest)
        if fut is None:
            fut = asyncio.ensure_future(self._build_dax(digest, path))
            self._dax_builds[digest] = fut
            fut.add_done_callback(lambda _f: self._dax_builds.pop(digest, None))
        # shield: one waiter being cancelled must not cancel the build for the others.
        return await asyncio.shield(fut)

    async def _build_dax(self, digest: str, path: str) -> str:
        async with self._dax_limiter:
            if is_trusted(path, digest):
                return path
            started = time.monotonic()
            layer = {"digest": digest}
            (mnt,) = await self.acquire([layer])
            try:
                index = self._indexes.get(digest)
                if index is not None and self.source_path(digest) == self.lazy_path(digest):
                    # mkfs reads every file in order, one chunk miss at a time; fetching the
                    # (now pinned) chunks in parallel first is several times faster.
                    await asyncio.to_thread(self._fetch_all_chunks, index)
                size = await asyncio.to_thread(build_dax_image, mnt, path, digest, mkfs=self.mkfs_erofs)
            except (DaxBuildError, OSError) as exc:
                raise ImageUnavailable(f"layer {digest}: cannot build its DAX variant: {exc}") from exc
            finally:
                await self.release([layer])
        self.dax_builds += 1
        log.info("layer_dax_built", digest=digest, bytes=size, seconds=round(time.monotonic() - started, 2))
        return path

    def _fetch_all_chunks(self, index: ChunkIndex) -> None:
        missing = [i for i, h in enumerate(index.chunks) if not self.chunks.cached(h)]
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="corral-chunk-fill") as pool:
            for _ in pool.map(lambda i: self.chunks.get(index, i), missing):
                pass

    # ---- disk images (VMs) --------------------------------------------------------------

    def disk_path(self, digest: str) -> str:
        return f"{self.disk_dir}/{DIGEST_RE.match(digest).group(1)}"  # type: ignore[union-attr]

    async def resolve_disk_image(self, name: str) -> dict[str, Any]:
        """image-service's record of ``name`` (its latest version) or ``name:version``."""
        base, _, version = name.partition(":")
        if not base or (":" in name and not version):
            raise DiskImageNotFound(f"disk image {name!r} not found", loc=["body", "disk_image"])
        url = f"/v1/disk-images/{quote(base, safe='')}" + (f"/{quote(version, safe='')}" if version else "")
        try:
            resp = await self._client.get(url)
        except httpx.HTTPError as exc:
            raise ImageUnavailable(f"image-service unreachable: {exc}") from exc
        if resp.status_code == 404:
            raise DiskImageNotFound(f"disk image {name!r} not found", loc=["body", "disk_image"])
        if resp.status_code != 200:
            raise ImageUnavailable(f"image-service answered {resp.status_code} for disk image {name!r}")
        image = resp.json()
        _digest_of(image)
        if image.get("format") not in DISK_IMAGE_FORMATS:
            raise ImageUnavailable(f"disk image {name!r}: unsupported format {image.get('format')!r}")
        return image

    async def acquire_disk_image(self, name: str) -> tuple[str, str]:
        """(local path, format) of disk image ``name`` or ``name:version``, downloaded once
        per digest (sha256-checked and re-inspected with qemu-img), read-only, and held
        until ``release_disk_image(name)``. VMs boot from a qcow2 overlay on top of it.

        Raises DiskImageNotFound (an ImageUnavailable) for an unknown name.
        """
        image = await self.resolve_disk_image(name)
        digest, fmt = image["digest"], image["format"]
        self._disk_refs[digest] += 1
        try:
            path = await self._ensure_disk(digest, fmt)
        except BaseException:
            self._release_disk(digest)
            raise
        self._disk_held.setdefault(name, []).append(digest)
        return path, fmt

    async def release_disk_image(self, name: str) -> None:
        """Give back one reference taken by ``acquire_disk_image(name)``; a name holding
        none is ignored. When ``name`` has no version and a newer one appeared between two
        acquires, the oldest acquisition is released first."""
        held = self._disk_held.get(name)
        if not held:
            return
        digest = held.pop(0)
        if not held:
            del self._disk_held[name]
        self._release_disk(digest)

    def _release_disk(self, digest: str) -> None:
        if self._disk_refs[digest] > 1:
            self._disk_refs[digest] -= 1
        else:
            self._disk_refs.pop(digest, None)

    def disk_refcount(self, digest: str) -> int:
        return self._disk_refs.get(digest, 0)

    async def _ensure_disk(self, digest: str, fmt: str) -> str:
        path = self.disk_path(digest)
        if os.path.exists(path):
            return path
        key = f"disk:{digest}"
        fut = self._downloads.get(key)
        if fut is None:
            fut = asyncio.ensure_future(self._download(digest, path, verify=lambda part: self._check_disk(part, fmt)))
            self._downloads[key] = fut
            fut.add_done_callback(lambda _f: self._downloads.pop(key, None))
        return await asyncio.shield(fut)

    def _check_disk(self, path: str, fmt: str) -> None:
        # image-service checked it at upload; QEMU runs here, so check again what arrived.
        try:
            inspect_disk_image(path, fmt, qemu_img=self.qemu_img)
        except DiskImageRefused as exc:
            raise ImageUnavailable(f"disk image refused on this node: {exc}") from exc
        except OSError as exc:
            raise ImageUnavailable(f"cannot inspect disk image: {exc}") from exc

    def prune_files(self) -> int:
        """Remove the DAX variants and disk images no sandbox holds now; returns bytes freed.

        Nothing calls this on a timer: like eager blobs, they stay until asked (an operator,
        a future disk-pressure policy). A later acquire rebuilds or downloads them again.
        """
        held_dax = {d for (d, dax) in self._file_refs if dax} | set(self._dax_builds)
        freed = 0
        for directory, held in ((self.dax_dir, held_dax), (self.disk_dir, set(self._disk_refs))):
            for name in os.listdir(directory):
                if name.startswith(".tmp-") or name.endswith((".part", ".json")):
                    continue
                digest = "sha256:" + name.removesuffix(".erofs")
                if digest in held or f"disk:{digest}" in self._downloads:
                    continue
                path = f"{directory}/{name}"
                with contextlib.suppress(FileNotFoundError):
                    freed += os.stat(path).st_size
                    if directory == self.dax_dir:
                        # Sidecar first: a crash in between leaves an untrusted image, rebuilt.
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(path.removesuffix(".erofs") + ".json")
                    os.unlink(path)
        return freed

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
        for name in os.listdir(self.disk_dir):
            if name.endswith(".part") or name.startswith(".tmp-"):
                os.unlink(f"{self.disk_dir}/{name}")
        for name in os.listdir(self.dax_dir):
            path = f"{self.dax_dir}/{name}"
            # Unfinished builds, and images whose sidecar never got written (rebuilt on use).
            if name.startswith(".tmp-") or (
                    name.endswith(".erofs") and not is_trusted(path, "sha256:" + name.removesuffix(".erofs"))):
                os.unlink(path)
