"""The api's side of the data path: calls to the node-agent that owns a sandbox."""

from collections.abc import AsyncIterator
from typing import Any

import httpx

from corral_common.contracts.images import path_segment
from corral_common.errors import PayloadTooLarge, ServiceUnavailable, raise_for_upstream
from corral_common.internal import INTERNAL_TOKEN_HEADER
from corral_common.state import NodeInfo


def node_url(node: NodeInfo, *segments: str) -> str:
    """The URL of a path on ``node``, each segment escaped as exactly one (an id can neither
    add a segment nor a query)."""
    return node.url.rstrip("/") + "".join("/" + path_segment(segment) for segment in segments)


class NodeClient:
    def __init__(self, internal_token: str, timeout_s: float = 3600.0, *, max_connections: int = 1000,
                 pool_timeout_s: float = 5.0):
        headers = {INTERNAL_TOKEN_HEADER: internal_token} if internal_token else {}
        self.headers = headers  # for connections httpx does not make (WebSocket ingress)
        # A request waits pool_timeout_s at most for a free connection: httpx.PoolTimeout, which
        # corral_common.overload answers with a 503 (so it is not caught below).
        self.http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout_s, connect=5.0, pool=pool_timeout_s),
                                      limits=httpx.Limits(max_connections=max_connections,
                                                          max_keepalive_connections=min(200, max_connections)))

    async def close(self) -> None:
        await self.http.aclose()

    @staticmethod
    def _raise_for(response: httpx.Response) -> None:
        raise_for_upstream(response, "node_error", "node-agent error")

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self.http.request(method, url, **kwargs)
        except httpx.PoolTimeout:
            raise
        except httpx.HTTPError as exc:
            raise ServiceUnavailable(f"node-agent unreachable: {exc.__class__.__name__}") from exc
        self._raise_for(response)
        return response

    async def stream(self, method: str, url: str, *, is_error: Any = None,
                     **kwargs: Any) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        """``is_error(response)`` decides which answers are the node's errors (default: every
        status >= 400); the rest stream back whatever their status."""
        is_error = is_error or (lambda r: r.status_code >= 400)
        try:
            response = await self.http.send(self.http.build_request(method, url, **kwargs), stream=True)
        except httpx.PoolTimeout:
            raise
        except httpx.HTTPError as exc:
            raise ServiceUnavailable(f"node-agent unreachable: {exc.__class__.__name__}") from exc
        if is_error(response):
            await response.aread()
            await response.aclose()
            self._raise_for(response)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.aiter_raw():
                    yield chunk
            finally:
                await response.aclose()

        return response, body()


async def capped(stream: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    """Passes an upload through, failing once it grows past ``limit`` bytes."""
    seen = 0
    async for chunk in stream:
        seen += len(chunk)
        if seen > limit:
            raise PayloadTooLarge(f"upload exceeds {limit} bytes", loc=["body"])
        yield chunk
