"""Files handed to VMs: layer images (as they are, or their DAX variant) and disk images.

dax/<hex>.erofs      DAX-capable variant of a layer for VMs (uncompressed, 2 MiB-padded;
                     built once per digest from the mounted layer, see ``dax``) + <hex>.json
disks/<hex>          VM disk image (qcow2/raw) from image-service, read-only (0444): a VM
                     boots from a per-sandbox qcow2 overlay on top of it

VMs attach layer files as guest disks or map them with virtio-pmem (``LayerFiles``) and
may boot a disk image (``DiskImages``). Both are refcounted; DAX variants and disk images
stay on disk when nothing holds them, until ``prune()``.
"""

import asyncio
import contextlib
import os
import time
from collections import Counter

from corral_common.contracts.images import digest_hex
from corral_common.disk_images import DiskImageRefused, inspect_disk_image
from corral_common.logging import get_logger
from corral_node_agent.errors import ImageUnavailable
from corral_node_agent.layers.catalog import ImageCatalog
from corral_node_agent.layers.dax import DaxBuildError, build_dax_image, is_trusted, sidecar_path
from corral_node_agent.layers.lazy.loader import LazyLoader
from corral_node_agent.layers.mounts import LayerMounts
from corral_node_agent.layers.single_flight import SingleFlight
from corral_node_agent.layers.store import BlobStore

log = get_logger(__name__)


def remove_unheld(directory: str, held: set[str], *, suffix: str = "") -> int:
    """Remove the finished files of ``directory`` (``<hex><suffix>``) whose digest is not in
    ``held``, with their sidecars; returns bytes freed."""
    freed = 0
    for name in os.listdir(directory):
        if name.startswith(".tmp-") or name.endswith((".part", ".json")):
            continue
        if "sha256:" + name.removesuffix(suffix) in held:
            continue
        path = f"{directory}/{name}"
        with contextlib.suppress(FileNotFoundError):
            freed += os.stat(path).st_size
            if suffix:
                # Sidecar first: a crash in between leaves an untrusted image, rebuilt.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(sidecar_path(path))
            os.unlink(path)
    return freed


class LayerFiles:
    def __init__(self, root: str, store: BlobStore, mounts: LayerMounts, lazy: LazyLoader, *, mkfs_erofs: str):
        self.dax_dir = f"{root}/dax"
        os.makedirs(self.dax_dir, exist_ok=True)
        self.store = store
        self.mounts = mounts
        self.lazy = lazy
        self.mkfs_erofs = mkfs_erofs
        self._refs: Counter[tuple[str, bool]] = Counter()  # (digest, dax) -> references
        self._dax_builds = SingleFlight()
        # Conversions read a whole layer and write it again: one at a time per node.
        self._dax_limiter = asyncio.Semaphore(1)
        self.dax_builds = 0  # conversions done by this process (observability, tests)

    def dax_path(self, digest: str) -> str:
        return f"{self.dax_dir}/{digest_hex(digest)}.erofs"

    def refcount(self, digest: str, *, dax: bool) -> int:
        return self._refs.get((digest, dax), 0)

    async def acquire(self, digests: list[str], *, dax: bool) -> list[str]:
        """The image file of each layer, in the given order (like ``LayerMounts.acquire``),
        each pinned until ``release(same digests, dax=same)``.

        - ``dax=False``: the layer's EROFS file as it is (lz4hc-compressed; for virtio-blk).
          Eager: the verified blob. Lazy: the layer's FUSE file, whose reads fetch missing
          chunks on demand (a path through /proc/<server pid>/root: any root process of this
          node, QEMU started by the agent, can open, read and mmap it); its chunks stay
          pinned in the cache while it is open.
        - ``dax=True``: the DAX-capable variant (uncompressed, 2 MiB-padded; see ``dax``),
          built from the mounted layer the first time any sandbox asks for it, then kept
          across sandboxes and agent restarts. Concurrent callers wait for one build.

        Raises ImageUnavailable (nothing is left held then).
        """
        # References first: prune() never removes what an acquire is still preparing.
        for d in digests:
            self._refs[(d, dax)] += 1
        try:
            if dax:
                unique = list(dict.fromkeys(digests))
                built = await asyncio.gather(*(self._ensure_dax(d) for d in unique))
                paths = dict(zip(unique, built, strict=True))
                return [paths[d] for d in digests]
            await self.store.ensure(digests)
            return [self.store.source_path(d) for d in digests]
        except BaseException:
            self.release(digests, dax=dax)
            raise

    def release(self, digests: list[str], *, dax: bool) -> None:
        for d in digests:
            key = (d, dax)
            if self._refs[key] > 1:
                self._refs[key] -= 1
                continue
            self._refs.pop(key, None)

    async def _ensure_dax(self, digest: str) -> str:
        path = self.dax_path(digest)
        if is_trusted(path, digest):  # a stat and a small read: fine on the loop
            return path
        return await self._dax_builds.run(digest, lambda: self._build_dax(digest, path))

    async def _build_dax(self, digest: str, path: str) -> str:
        async with self._dax_limiter:
            if is_trusted(path, digest):
                return path
            started = time.monotonic()
            (mnt,) = await self.mounts.acquire([digest])
            try:
                if self.store.source_path(digest) == self.lazy.path(digest):
                    # mkfs reads every file in order, one chunk miss at a time; fetching the
                    # (now pinned) chunks in parallel first is several times faster.
                    await asyncio.to_thread(self.lazy.fill, digest)
                size = await asyncio.to_thread(build_dax_image, mnt, path, digest, mkfs=self.mkfs_erofs)
            except (DaxBuildError, OSError) as exc:
                raise ImageUnavailable(f"layer {digest}: cannot build its DAX variant: {exc}") from exc
            finally:
                await self.mounts.release([digest])
        self.dax_builds += 1
        log.info("layer.dax_built", digest=digest, bytes=size, seconds=round(time.monotonic() - started, 2))
        return path

    def prune(self) -> int:
        """Remove the DAX variants no sandbox holds now; returns bytes freed."""
        held = {d for (d, dax) in self._refs if dax} | self._dax_builds.keys()
        return remove_unheld(self.dax_dir, held, suffix=".erofs")

    def cleanup_orphans(self) -> None:
        for name in os.listdir(self.dax_dir):
            path = f"{self.dax_dir}/{name}"
            # Unfinished builds, and images whose sidecar never got written (rebuilt on use).
            if name.startswith(".tmp-") or (
                    name.endswith(".erofs") and not is_trusted(path, "sha256:" + name.removesuffix(".erofs"))):
                os.unlink(path)


class DiskImages:
    def __init__(self, root: str, catalog: ImageCatalog, store: BlobStore, *, qemu_img: str):
        self.dir = f"{root}/disks"
        os.makedirs(self.dir, exist_ok=True)
        self.catalog = catalog
        self.store = store
        self.qemu_img = qemu_img
        self._refs: Counter[str] = Counter()  # digest -> references
        self._held: dict[str, list[str]] = {}  # name as acquired -> digests, oldest first
        self._downloads = SingleFlight()

    def path(self, digest: str) -> str:
        return f"{self.dir}/{digest_hex(digest)}"

    def refcount(self, digest: str) -> int:
        return self._refs.get(digest, 0)

    async def acquire(self, name: str) -> tuple[str, str]:
        """(local path, format) of disk image ``name`` or ``name:version``, downloaded once
        per digest (sha256-checked and re-inspected with qemu-img), read-only, and held
        until ``release(name)``. VMs boot from a qcow2 overlay on top of it.

        Raises DiskImageNotFound (an ImageUnavailable) for an unknown name.
        """
        image = await self.catalog.disk_image(name)
        self._refs[image.digest] += 1
        try:
            path = await self._ensure(image.digest, image.format)
        except BaseException:
            self._release(image.digest)
            raise
        self._held.setdefault(name, []).append(image.digest)
        return path, image.format

    def release(self, name: str) -> None:
        """Give back one reference taken by ``acquire(name)``; a name holding none is
        ignored. When ``name`` has no version and a newer one appeared between two
        acquires, the oldest acquisition is released first."""
        held = self._held.get(name)
        if not held:
            return
        digest = held.pop(0)
        if not held:
            del self._held[name]
        self._release(digest)

    def _release(self, digest: str) -> None:
        if self._refs[digest] > 1:
            self._refs[digest] -= 1
        else:
            self._refs.pop(digest, None)

    async def _ensure(self, digest: str, fmt: str) -> str:
        path = self.path(digest)
        if os.path.exists(path):  # noqa: ASYNC240 - one local stat
            return path
        return await self._downloads.run(
            digest, lambda: self.store.download(digest, path, verify=lambda part: self._check(part, fmt)))

    def _check(self, path: str, fmt: str) -> None:
        # image-service checked it at upload; QEMU runs here, so check again what arrived.
        try:
            inspect_disk_image(path, fmt, qemu_img=self.qemu_img)
        except DiskImageRefused as exc:
            raise ImageUnavailable(f"disk image refused on this node: {exc}") from exc
        except OSError as exc:
            raise ImageUnavailable(f"cannot inspect disk image: {exc}") from exc

    def prune(self) -> int:
        """Remove the disk images no sandbox holds now; returns bytes freed."""
        return remove_unheld(self.dir, set(self._refs) | self._downloads.keys())

    def cleanup_orphans(self) -> None:
        for name in os.listdir(self.dir):
            if name.endswith(".part") or name.startswith(".tmp-"):
                os.unlink(f"{self.dir}/{name}")
