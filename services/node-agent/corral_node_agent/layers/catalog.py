"""The node's questions to image-service: the layers of an environment, the record of a disk
image. Asked through the shared client; its failures become ``ImageUnavailable``.

A sandbox's environment is resolved once, by the api, into the pin its record carries
(``SandboxRecord.image``): the node starts pinned sandboxes on those layers and asks nothing
here. ``environment`` serves what has no pin: compat(d03aa3f, 2026-12-07) for records written before pins,
restored snapshots and jobs queued again from SQL after Redis lost them (removable once
snapshot and job rows keep their pin), and the node's own fncall workers.
"""

from corral_common.contracts.images import (
    DiskImage,
    EnvironmentCache,
    EnvironmentLayer,
    ImageNotFound,
    ImageServiceClient,
    ImageServiceError,
    UnexpectedStatus,
)
from corral_common.inputs import split_disk_image_ref
from corral_node_agent.errors import DiskImageNotFound, EnvironmentNotFound, ImageUnavailable

ENVIRONMENT_TTL_S = 60.0


def _unavailable(exc: ImageServiceError, what: str) -> ImageUnavailable:
    return ImageUnavailable(f"{exc} for {what}" if isinstance(exc, UnexpectedStatus) else str(exc))


class ImageCatalog:
    def __init__(self, client: ImageServiceClient):
        self.client = client
        self._environments = EnvironmentCache(client, ENVIRONMENT_TTL_S)

    async def environment(self, name: str, tenant: str = "") -> tuple[EnvironmentLayer, ...]:
        """Layers of an environment as ``tenant`` sees it (its own, else the shared
        catalogue's), base first (as image-service returns them); cached briefly (see
        ``EnvironmentCache``)."""
        try:
            environment = await self._environments.get(name, tenant)
        except ImageNotFound:
            raise EnvironmentNotFound(f"environment {name!r} not found", loc=["body", "environment"]) from None
        except ImageServiceError as exc:
            raise _unavailable(exc, f"environment {name!r}") from exc
        if not environment.layers:
            raise ImageUnavailable(f"environment {name!r} has no layers")
        return environment.layers

    async def disk_image(self, name: str) -> DiskImage:
        """image-service's record of ``name`` (its latest version) or ``name:version``."""
        base, version = split_disk_image_ref(name)
        if not base or (":" in name and not version):
            raise DiskImageNotFound(f"disk image {name!r} not found", loc=["body", "disk_image"])
        try:
            return await self.client.disk_image(base, version)
        except ImageNotFound:
            raise DiskImageNotFound(f"disk image {name!r} not found", loc=["body", "disk_image"]) from None
        except ImageServiceError as exc:
            raise _unavailable(exc, f"disk image {name!r}") from exc
