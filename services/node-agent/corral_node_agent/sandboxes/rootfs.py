"""What a sandbox starts on: its environment's layers from the layer cache, in the form its
backend wants (``mounts``: mounted layer directories, ``LayerCache.acquire``; ``files`` /
``dax_files``: layer image files, ``LayerCache.acquire_files``), and with ``spec.disk_image``
its boot disk (``LayerCache.acquire_disk_image``). The only code that knows which cache call
goes with which ``LayerFormat``; everything acquired for an entry is released once."""

from collections.abc import Sequence

from corral_common.contracts.images import EnvironmentLayer
from corral_common.contracts.sandboxes import FailureReason
from corral_common.logging import get_logger
from corral_node_agent.backends.types import BootDisk, DiskFormat, LayerFormat, RootFs
from corral_node_agent.errors import ImageUnavailable, StartFailed
from corral_node_agent.layers.cache import LayerCache
from corral_node_agent.sandboxes.entry import SandboxEntry

log = get_logger(__name__)


class RootfsAssembler:
    def __init__(self, layers: LayerCache):
        self.layers = layers

    async def resolve_unpinned(self, entry: SandboxEntry) -> tuple[EnvironmentLayer, ...]:
        """The environment's layers now, for a create whose record has no pinned image: it is
        pinned here, and starts (or is claimed from the warm pool) like a pinned one.
        compat(d03aa3f, 2026-12-07), only: records written before the api pinned images, restored snapshots,
        jobs queued again from SQL after Redis lost them; it can go (and the catalog's
        environment cache with it, but for fncall) once snapshot and job rows keep their pin."""
        try:
            return await self.layers.resolve_environment(entry.spec.environment, entry.tenant)
        except ImageUnavailable as exc:
            raise StartFailed(exc.message, FailureReason.image_unavailable) from exc

    async def acquire(self, entry: SandboxEntry) -> RootFs:
        """Layers (top first, in the form the sandbox's backend wants) and the boot disk."""
        spec = entry.spec
        lower: list[str] = []
        boot_disk = None
        try:
            if spec.environment:
                layers = entry.pinned  # (create and the warm pool pin every entry of an environment)
                if layers is None:
                    raise ImageUnavailable(f"environment {spec.environment!r} was not resolved")
                acquired = await self._acquire_layers(entry.layer_format, layers)
                entry.layers = layers
                # image-service lists base first; overlays and guests want the top layer first.
                lower = list(reversed(acquired))
            if spec.disk_image:
                path, disk_format = await self.layers.acquire_disk_image(spec.disk_image)
                entry.disk_image = spec.disk_image
                boot_disk = BootDisk(path=path, format=DiskFormat(disk_format))
        except ImageUnavailable as exc:
            await self.release(entry)
            raise StartFailed(exc.message, FailureReason.image_unavailable) from exc
        except BaseException:
            await self.release(entry)
            raise
        return RootFs(layers=lower, boot_disk=boot_disk)

    async def release(self, entry: SandboxEntry) -> None:
        """Give back what acquire took; safe to call twice."""
        layers, entry.layers = entry.layers, ()
        disk_image, entry.disk_image = entry.disk_image, None
        if layers:
            if entry.layer_format is LayerFormat.mounts:
                await self.layers.release(layers)
            else:
                await self.layers.release_files(layers, dax=entry.layer_format is LayerFormat.dax_files)
        if disk_image:
            await self.layers.release_disk_image(disk_image)

    async def hold_adopted(self, sandbox_id: str, entry: SandboxEntry, layers: Sequence[EnvironmentLayer]) -> bool:
        """Take references on the layers an adopted sandbox runs on, as its create did: the
        cache must not evict them under it, and a lazy layer's fault must end it. (Its mounts
        live on in its own mount namespace, a VM's QEMU keeps its files open: what is acquired
        here is this agent's handle on the same layers, released when it ends.) True: some of
        them can no longer be read there (their lazy-layer server died while no agent ran). A
        layer that cannot be held is logged; the sandbox runs on, unreferenced, as before."""
        try:
            await self._acquire_layers(entry.layer_format, layers)
        except (ImageUnavailable, OSError) as exc:
            log.warning("sandbox.adopted_layers_unheld", sandbox_id=sandbox_id, error=str(exc))
            return False
        entry.layers = tuple(layers)
        if lost := self.layers.lazy_layers_lost(layers):
            log.warning("sandbox.image_unavailable", sandbox_id=sandbox_id, digests=lost,
                        error="its lazy-layer server exited while no agent ran")
            return True
        return False

    async def _acquire_layers(self, layer_format: LayerFormat, layers: Sequence[EnvironmentLayer]) -> list[str]:
        if layer_format is LayerFormat.mounts:
            return await self.layers.acquire(layers)
        return await self.layers.acquire_files(layers, dax=layer_format is LayerFormat.dax_files)
