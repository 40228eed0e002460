"""Read-only EROFS mounts of layers, shared by every container using them.

mnt/<hex>            EROFS mount of the layer, shared by every sandbox using it;
                     refcounted, unmounted when its last sandbox goes (after an idle delay)

A lazily loaded layer is mounted from its FUSE file (its chunks stay pinned in the chunk
cache while the mount holds the file open). When the lazy-layer server behind it dies, the
mount is detached: sandboxes on it fail, the next one mounts it anew.
"""

import asyncio
import os

from corral_common.contracts.images import digest_hex
from corral_common.logging import get_logger
from corral_host import mounts
from corral_node_agent.errors import ImageUnavailable
from corral_node_agent.layers.lazy.loader import LazyLoader
from corral_node_agent.layers.store import BlobStore

log = get_logger(__name__)

LAYER_IDLE_UNMOUNT_S = 30.0


class LayerMounts:
    def __init__(self, root: str, store: BlobStore, lazy: LazyLoader):
        self.dir = f"{root}/mnt"
        os.makedirs(self.dir, exist_ok=True)
        self.store = store
        self.lazy = lazy
        self._refs: dict[str, int] = {}
        self._idle_unmounts: dict[str, asyncio.TimerHandle] = {}
        self._lock = asyncio.Lock()
        self._dead: set[str] = set()  # mounted from a lazy-layer server that died since
        lazy.add_exit_listener(self._server_died)

    def path(self, digest: str) -> str:
        return f"{self.dir}/{digest_hex(digest)}"

    def refcount(self, digest: str) -> int:
        return self._refs.get(digest, 0)

    async def acquire(self, digests: list[str]) -> list[str]:
        """Ensure and mount the layers, taking one reference each; returns mount dirs in the
        given order. Pair with release(same digests)."""
        await self.store.ensure(digests)
        taken: list[str] = []
        async with self._lock:
            try:
                for d in digests:
                    idle = self._idle_unmounts.pop(d, None)
                    if idle is not None:
                        idle.cancel()
                    if self._refs.get(d, 0) == 0 or d in self._dead:
                        self._dead.discard(d)
                        mnt = self.path(d)
                        os.makedirs(mnt, exist_ok=True)
                        if not mounts.is_mountpoint(mnt):
                            src = self.store.source_path(d)
                            if src == self.lazy.path(d):
                                # Reads go through our FUSE workers: keep them off the loop.
                                await asyncio.to_thread(self.lazy.mount, d, mnt)
                            else:
                                mounts.mount_erofs(src, mnt)
                    self._refs[d] = self._refs.get(d, 0) + 1
                    taken.append(d)
            except OSError as exc:
                self._release_locked(taken)
                raise ImageUnavailable(f"cannot mount layer: {exc}") from exc
        return [self.path(d) for d in digests]

    def _server_died(self, digests: list[str]) -> None:
        for d in digests:
            self.detach(d)
            if self._refs.get(d, 0) > 0:
                self._dead.add(d)

    async def release(self, digests: list[str]) -> None:
        async with self._lock:
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
        mnt = self.path(digest)
        try:
            mounts.umount(mnt)
            os.rmdir(mnt)
        except OSError:
            log.exception("layer.umount_failed", digest=digest)

    def unmount_idle(self) -> None:
        """Unmount now the layers waiting for their idle delay (agent shutdown)."""
        for digest in list(self._idle_unmounts):
            self._idle_unmounts.pop(digest).cancel()
            self._unmount_if_idle(digest)

    def detach(self, digest: str) -> None:
        """Unmount a layer whatever holds it (its lazy file went away)."""
        try:
            mounts.umount(self.path(digest))
        except OSError:
            log.exception("layer.detach_failed", digest=digest)

    def cleanup_orphans(self) -> None:
        """Drop the mounts a previous run left (refs start at zero)."""
        for name in os.listdir(self.dir):
            path = f"{self.dir}/{name}"
            mounts.umount_tree(path)
            try:
                os.rmdir(path)
            except OSError:
                pass
