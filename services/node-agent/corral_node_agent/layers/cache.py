"""Node-local cache of EROFS layers and their shared read-only mounts.

Two modes (``CORRAL_NODE_LAYER_MODE``):

- ``eager``: the whole blob is downloaded and sha256-checked before the first mount.
- ``lazy`` (default): only the layer's chunk index is fetched before start (plus the chunk
  holding the EROFS superblock); the layer is a file of a FUSE filesystem run by the
  lazy-layer server, a process of its own that outlives agent restarts (``lazy.server_main``),
  whose reads fetch missing chunks on demand into the node-wide
  chunk cache (``lazy.chunks``), and EROFS is mounted straight from that file. A blob
  image-service has no index for falls back to the eager path.

blobs/<hex>          verified blob (eager; downloaded to <hex>.part, checked, renamed)
chunks/<2 hex>/<hex> verified chunks (lazy; node-wide, deduplicated, LRU-bounded)
lazy/<hex>           FUSE file of a lazily loaded layer (one FUSE mount for all layers, in
                     the lazy-layer server's mount namespace; lazy-server.* its files)
mnt/<hex>            EROFS mount of the layer, shared by every sandbox using it;
                     refcounted, unmounted when its last sandbox goes (after an idle delay)
dax/<hex>.erofs      DAX-capable variant of a layer for VMs (uncompressed, 2 MiB-padded;
                     built once per digest from the mounted layer, see ``dax``) + <hex>.json
disks/<hex>          VM disk image (qcow2/raw) from image-service, read-only (0444): a VM
                     boots from a per-sandbox qcow2 overlay on top of it

Containers mount layers (``acquire``); VMs attach layer files as guest disks or map them
with virtio-pmem (``acquire_files``) and may boot a disk image (``acquire_disk_image``).

``LayerCache`` only wires the parts together, one job each: ``catalog`` (what image-service
says an environment or disk image is), ``store`` (blobs), ``lazy`` (lazily loaded layers),
``mounts``, ``files`` (VM layer files and DAX variants) and ``disks``. It takes its settings
(``NodeAgentSettings.layers()``); ``transport`` replaces image-service in tests.
"""

import asyncio
import os
from collections.abc import Callable, Iterable

import httpx

from corral_common.contracts.images import EnvironmentLayer, ImageServiceClient
from corral_node_agent.layers.catalog import ImageCatalog
from corral_node_agent.layers.files import DiskImages, LayerFiles
from corral_node_agent.layers.lazy.loader import LazyLoader
from corral_node_agent.layers.mounts import LayerMounts
from corral_node_agent.layers.store import BlobStore
from corral_node_agent.settings import LayerSettings


def _digests(layers: Iterable[EnvironmentLayer]) -> list[str]:
    return [layer.digest for layer in layers]


class LayerCache:
    def __init__(self, settings: LayerSettings, *, transport: httpx.AsyncBaseTransport | None = None):
        self.settings = settings
        self.root = os.path.join(os.path.abspath(settings.state_dir), "layers")
        self.client = ImageServiceClient(settings.image_service_url, internal_token=settings.internal_token,
                                         transport=transport,
                                         timeout=httpx.Timeout(settings.download_timeout_s, connect=10.0))
        self.catalog = ImageCatalog(self.client)
        # The lazy-layer server fetches chunks itself (it outlives us): over HTTP, always.
        self.lazy = LazyLoader(self.root, self.client, settings)
        self.store = BlobStore(self.root, self.client, self.lazy, mode=settings.mode)
        self.mounts = LayerMounts(self.root, self.store, self.lazy)
        self.files = LayerFiles(self.root, self.store, self.mounts, self.lazy, mkfs_erofs=settings.mkfs_erofs)
        self.disks = DiskImages(self.root, self.catalog, self.store, qemu_img=settings.qemu_img)

    async def aclose(self) -> None:
        self.mounts.unmount_idle()
        await self.client.aclose()
        # Nothing lazy is unmounted or stopped: the server serves the sandboxes left running
        # (a restarted agent adopts them) and exits by itself once no layer is mounted.
        await asyncio.to_thread(self.lazy.stop)

    def add_fault_listener(self, callback: Callable[[str, str], None]) -> None:
        """Call ``callback(layer_digest, error)`` on the event loop when a read of a lazily
        loaded layer fails for good (see ``LazyLoader.add_fault_listener``)."""
        self.lazy.add_fault_listener(callback)

    def add_exit_listener(self, callback: Callable[[list[str]], None]) -> None:
        """Call ``callback(digests)`` on the event loop when the lazy-layer server behind those
        layers exited: every mount of them reads EIO from then on. The layer mounts are
        detached by then; a holder that keeps its own view of one (a bind elsewhere) drops it,
        releases the layers and acquires them again, from the next server."""
        self.lazy.add_exit_listener(callback)

    def held_bytes(self) -> dict[str, int]:
        """Bytes of each layer this node holds (scheduler locality): a whole verified blob, or
        the chunks of a lazily loaded layer that sit in the node's chunk cache."""
        held: dict[str, int] = {}
        try:
            names = os.listdir(self.store.dir)
        except OSError:
            names = []
        for name in names:
            if len(name) == 64:
                try:
                    held[f"sha256:{name}"] = os.stat(os.path.join(self.store.dir, name)).st_size
                except OSError:
                    pass
        for digest, size in self.lazy.held().items():
            held.setdefault(digest, size)  # a whole blob, when there is one, is what we hold
        return {digest: size for digest, size in held.items() if size > 0}

    def lazy_layers_lost(self, layers: Iterable[EnvironmentLayer]) -> list[str]:
        """Of the layers a sandbox started before this agent ran (an adopted one) was started
        on, the digests its mounts can no longer read: layers served lazily now, by a server
        this agent had to start. The server a previous agent used would still run had it not
        died (it lives while any layer file is open, and that sandbox's mounts keep theirs
        open), and its FUSE files died with it. Call after acquiring them."""
        if not self.lazy.server.started_one:
            return []
        return [d for d in _digests(layers) if self.store.source_path(d) == self.lazy.path(d)]

    async def resolve_environment(self, name: str, tenant: str = "") -> tuple[EnvironmentLayer, ...]:
        """Layers of an environment as ``tenant`` sees it, base first (as image-service
        returns them)."""
        return await self.catalog.environment(name, tenant)

    async def ensure(self, layers: Iterable[EnvironmentLayer]) -> list[str]:
        """Make every layer's blob present locally; returns blob paths in the given order."""
        return await self.store.ensure(_digests(layers))

    # ---- containers: mounts -------------------------------------------------------------

    async def acquire(self, layers: Iterable[EnvironmentLayer]) -> list[str]:
        """Ensure and mount the layers, taking one reference each; returns mount dirs in the
        given order. Pair with release(same layers)."""
        return await self.mounts.acquire(_digests(layers))

    async def release(self, layers: Iterable[EnvironmentLayer]) -> None:
        await self.mounts.release(_digests(layers))

    def refcount(self, digest: str) -> int:
        return self.mounts.refcount(digest)

    # ---- VMs: layer files and disk images -----------------------------------------------

    async def acquire_files(self, layers: Iterable[EnvironmentLayer], *, dax: bool) -> list[str]:
        """The image file of each layer, in the given order, each pinned until
        ``release_files(same layers, dax=same)`` (see ``LayerFiles.acquire``).
        Raises ImageUnavailable (nothing is left held then)."""
        return await self.files.acquire(_digests(layers), dax=dax)

    async def release_files(self, layers: Iterable[EnvironmentLayer], *, dax: bool) -> None:
        self.files.release(_digests(layers), dax=dax)

    def file_refcount(self, digest: str, *, dax: bool) -> int:
        return self.files.refcount(digest, dax=dax)

    async def acquire_disk_image(self, name: str) -> tuple[str, str]:
        """(local path, format) of disk image ``name`` or ``name:version``, held until
        ``release_disk_image(name)``. Raises DiskImageNotFound (an ImageUnavailable)."""
        return await self.disks.acquire(name)

    async def release_disk_image(self, name: str) -> None:
        self.disks.release(name)

    def disk_refcount(self, digest: str) -> int:
        return self.disks.refcount(digest)

    def prune_files(self) -> int:
        """Remove the DAX variants and disk images no sandbox holds now; returns bytes freed.

        Nothing calls this on a timer: like eager blobs, they stay until asked (an operator,
        a future disk-pressure policy). A later acquire rebuilds or downloads them again.
        """
        return self.files.prune() + self.disks.prune()

    def cleanup_orphans(self) -> None:
        """Drop mounts and partial downloads a previous run left (refs start at zero)."""
        # Layer mounts first (they hold the FUSE file), then a stale FUSE mount.
        self.mounts.cleanup_orphans()
        self.lazy.cleanup_orphans()
        self.store.cleanup_orphans()
        self.disks.cleanup_orphans()
        self.files.cleanup_orphans()
