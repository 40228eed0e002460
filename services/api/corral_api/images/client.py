"""The api's calls to image-service on a tenant's behalf (internal token, ``owner`` = tenant).

image-service does the work (storage, dedup by digest, EROFS builds, imports); this client
only forwards, streams bodies through, and hands image-service's 4xx answers back as they
are (same code, message and loc). Unreachable or 5xx is a 503.
"""

from collections.abc import AsyncIterator
from typing import Any

import httpx

from corral_common.contracts.images import path_segment
from corral_common.web.errors import ServiceUnavailable, raise_for_upstream
from corral_common.web.internal import INTERNAL_TOKEN_HEADER


class ImageServiceWrites:
    def __init__(self, base_url: str, internal_token: str, *, build_timeout_s: float = 900.0,
                 max_connections: int = 100, pool_timeout_s: float = 5.0):
        headers = {INTERNAL_TOKEN_HEADER: internal_token} if internal_token else {}
        # Long read timeout: a layer's answer comes after its EROFS build.
        self.http = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers,
                                      timeout=httpx.Timeout(build_timeout_s, connect=5.0, pool=pool_timeout_s),
                                      limits=httpx.Limits(max_connections=max_connections))

    async def aclose(self) -> None:
        await self.http.aclose()

    async def call(self, method: str, path: str, owner: str, *, params: dict[str, Any] | None = None,
                   **kwargs: Any) -> httpx.Response:
        query = {"owner": owner, **{k: v for k, v in (params or {}).items() if v is not None}}
        try:
            response = await self.http.request(method, path, params=query, **kwargs)
        except httpx.PoolTimeout:
            raise
        except httpx.HTTPError as exc:
            raise ServiceUnavailable(f"image-service unreachable: {exc.__class__.__name__}") from exc
        if response.status_code >= 500:
            raise ServiceUnavailable(f"image-service answered {response.status_code}")
        raise_for_upstream(response, "image_service_error", "image-service error")
        return response

    async def upload(self, path: str, owner: str, body: AsyncIterator[bytes], content_type: str,
                     params: dict[str, Any]) -> httpx.Response:
        return await self.call("POST", path, owner, params=params, content=body,
                               headers={"Content-Type": content_type})


def segments(*names: str) -> str:
    return "".join("/" + path_segment(name) for name in names)
