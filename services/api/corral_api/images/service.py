"""Images as a tenant sees them: its own layers and environments plus the operator's shared
catalogue, a storage quota, uploads streamed through to image-service (which stores each
distinct content once, whoever uploads it)."""

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager

from corral_api.images.client import ImageServiceWrites, segments
from corral_api.images.schemas import Environment, EnvironmentCreate, ImageImport, Layer, StorageUsage
from corral_common.web.errors import CorralError


@contextmanager
def naming_the_quota() -> Iterator[None]:
    """image-service's 413 ``storage_quota_exceeded`` also names the admin quota it stands for."""
    try:
        yield
    except CorralError as exc:
        if exc.code == "storage_quota_exceeded":
            exc.extra.setdefault("quota", "max_image_bytes")
        raise


class ImageCatalogService:
    def __init__(self, writes: ImageServiceWrites, *, quota_bytes: int | None,
                 forget_environment: Callable[[str, str], None] = lambda name, tenant: None,
                 tenant_quota: Callable[[str, int | None], Awaitable[int | None]] | None = None):
        self.writes = writes
        self.quota_bytes = quota_bytes
        # A tenant's own max_image_bytes (admin quotas) wins over the operator's default.
        self.tenant_quota = tenant_quota
        # Cached "this environment exists" answers of the sandbox path, dropped on a delete.
        self.forget_environment = forget_environment

    async def quota_for(self, tenant: str) -> int | None:
        if self.tenant_quota is None:
            return self.quota_bytes
        return await self.tenant_quota(tenant, self.quota_bytes)

    async def upload_layer(self, tenant: str, kind: str, name: str, version: str, body: AsyncIterator[bytes],
                           content_type: str) -> tuple[Layer, bool]:
        with naming_the_quota():
            response = await self.writes.upload("/v1/layers", tenant, body, content_type, {
                "kind": kind, "name": name, "version": version, "quota_bytes": await self.quota_for(tenant)})
        return Layer.of(response.json()), response.status_code == 201

    async def list_layers(self, tenant: str, kind: str | None) -> list[Layer]:
        response = await self.writes.call("GET", "/v1/layers", tenant, params={"kind": kind})
        return [Layer.of(item) for item in response.json()]

    async def get_layer(self, tenant: str, name: str, version: str) -> Layer:
        return Layer.of((await self.writes.call("GET", "/v1/layers" + segments(name, version), tenant)).json())

    async def delete_layer(self, tenant: str, name: str, version: str) -> Layer:
        return Layer.of((await self.writes.call("DELETE", "/v1/layers" + segments(name, version), tenant)).json())

    async def create_environment(self, tenant: str, body: EnvironmentCreate) -> tuple[Environment, bool]:
        response = await self.writes.call("POST", "/v1/environments", tenant, json=body.model_dump(mode="json"))
        return Environment.of(response.json()), response.status_code == 201

    async def list_environments(self, tenant: str) -> list[Environment]:
        return [Environment.of(item) for item in (await self.writes.call("GET", "/v1/environments", tenant)).json()]

    async def get_environment(self, tenant: str, name: str) -> Environment:
        return Environment.of((await self.writes.call("GET", "/v1/environments" + segments(name), tenant)).json())

    async def delete_environment(self, tenant: str, name: str) -> Environment:
        env = Environment.of((await self.writes.call("DELETE", "/v1/environments" + segments(name), tenant)).json())
        self.forget_environment(name, tenant)
        return env

    async def usage(self, tenant: str) -> StorageUsage:
        reply = (await self.writes.call("GET", "/v1/usage", tenant)).json()
        return StorageUsage(used_bytes=reply["bytes"], quota_bytes=await self.quota_for(tenant),
                            layers=reply["layers"])

    async def used_bytes(self, tenant: str) -> int:
        return (await self.writes.call("GET", "/v1/usage", tenant)).json()["bytes"]

    async def start_import(self, tenant: str, params: dict, body: AsyncIterator[bytes] | None,
                           content_type: str) -> tuple[ImageImport, int]:
        params = {**params, "quota_bytes": await self.quota_for(tenant)}
        with naming_the_quota():
            if body is None:
                response = await self.writes.call("POST", "/v1/imports", tenant, params=params)
            else:
                response = await self.writes.upload("/v1/imports", tenant, body, content_type, params)
        return ImageImport.of(response.json()), response.status_code

    async def get_import(self, tenant: str, import_id: str) -> ImageImport:
        return ImageImport.of((await self.writes.call("GET", "/v1/imports" + segments(import_id), tenant)).json())
