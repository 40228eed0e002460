"""Which layers (and how many bytes of each) a sandbox's environment needs, for placement by
locality, for a record without a pinned image (``SandboxRecord.image``: the api resolves every
create's environment once and the placer reads the pin). compat(d03aa3f, 2026-12-07) only: records written
before pins, and restored snapshots (not pinned yet); it can go when snapshots carry their
source's pin. Asked of image-service as the sandbox's tenant sees the environment, cached (an
environment's layers never change); any failure means "no locality", never a failed placement."""

import httpx

from corral_common.contracts.images import EnvironmentCache, ImageServiceClient, ImageServiceError
from corral_common.contracts.sandboxes import SandboxSpec
from corral_common.logging import get_logger

log = get_logger(__name__)


class EnvironmentLayers:
    def __init__(self, image_service_url: str, internal_token: str, ttl_s: float = 300.0):
        self.client = ImageServiceClient(image_service_url, internal_token=internal_token,
                                         timeout=httpx.Timeout(2.0))
        self.cache = EnvironmentCache(self.client, ttl_s)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def sizes(self, tenant: str, spec: SandboxSpec) -> dict[str, int]:
        """digest -> size of the spec's environment's layers; {} when unknown."""
        if not spec.environment:
            return {}
        try:
            environment = await self.cache.get(spec.environment, tenant)
        except ImageServiceError as exc:
            log.info("placement.locality_unknown", environment=spec.environment, error=str(exc))
            return {}
        return {layer.digest: layer.size for layer in environment.layers}
