"""Node-local cache of EROFS layer blobs and their shared read-only mounts.

blobs/<hex>      verified blob (downloaded to <hex>.part, sha256-checked, renamed)
mnt/<hex>        EROFS mount of that blob, shared by every sandbox using the layer;
                 refcounted, unmounted when its last sandbox goes
"""

import asyncio
import hashlib
import os
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from corral_common.errors import CorralError, NotFound
from corral_common.internal import INTERNAL_TOKEN_HEADER
from corral_common.logging import get_logger

from .. import host

log = get_logger(__name__)

DIGEST_RE = re.compile(r"^sha256:([0-9a-f]{64})$")

ENVIRONMENT_TTL_S = 60.0
LAYER_IDLE_UNMOUNT_S = 30.0


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


class LayerCache:
    def __init__(self, state_dir: str, image_service_url: str, *, internal_token: str = "",
                 transport: httpx.AsyncBaseTransport | None = None, timeout_s: float = 300.0):
        self.root = os.path.join(os.path.abspath(state_dir), "layers")
        self.blob_dir = f"{self.root}/blobs"
        self.mnt_dir = f"{self.root}/mnt"
        os.makedirs(self.blob_dir, exist_ok=True)
        os.makedirs(self.mnt_dir, exist_ok=True)
        self.base_url = image_service_url.rstrip("/")
        headers = {INTERNAL_TOKEN_HEADER: internal_token} if internal_token else {}
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers, transport=transport,
                                         timeout=httpx.Timeout(timeout_s, connect=10.0))
        self._downloads: dict[str, asyncio.Future[str]] = {}
        self._refs: dict[str, int] = {}
        self._idle_unmounts: dict[str, asyncio.TimerHandle] = {}
        self._environments: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._mount_lock = asyncio.Lock()

    async def aclose(self) -> None:
        for digest in list(self._idle_unmounts):
            self._idle_unmounts.pop(digest).cancel()
            self._unmount_if_idle(digest)
        await self._client.aclose()

    def blob_path(self, digest: str) -> str:
        return f"{self.blob_dir}/{DIGEST_RE.match(digest).group(1)}"  # type: ignore[union-attr]

    def mount_path(self, digest: str) -> str:
        return f"{self.mnt_dir}/{DIGEST_RE.match(digest).group(1)}"  # type: ignore[union-attr]

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
        fut = self._downloads.get(digest)
        if fut is None:
            # One download per digest however many sandboxes want it at once.
            fut = asyncio.ensure_future(self._download(digest, path))
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
                            host.mount_erofs(self.blob_path(d), mnt)
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

    def refcount(self, digest: str) -> int:
        return self._refs.get(digest, 0)

    def cleanup_orphans(self) -> None:
        """Drop mounts and partial downloads a previous run left (refs start at zero)."""
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
