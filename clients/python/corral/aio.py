"""The asyncio SDK: ``AsyncCorral`` → ``corral.sandboxes`` → ``AsyncSandbox``, same shape as the sync one.

    async with AsyncCorral(url, api_key) as corral:
        async with await corral.sandboxes.create("busybox") as sb:
            print((await sb.exec("echo hi")).stdout)

Every method of ``Corral`` exists here with the same parameters, awaited; both run the one
definition of each call (``corral._calls``, ``corral._transport``).
"""

import httpx

from corral._common import connect
from corral._transport import AsyncTransport
from corral.admin import AsyncAdmin, AsyncUsage
from corral.images import AsyncEnvironments, AsyncImages, AsyncLayers
from corral.jobs import AsyncJobs
from corral.nodes import AsyncNodes
from corral.rollouts import AsyncRollouts
from corral.sandboxes import AsyncSandbox, AsyncSandboxes
from corral.snapshots import AsyncSnapshots

__all__ = ["AsyncCorral", "AsyncSandbox", "AsyncSandboxes"]


class AsyncCorral:
    def __init__(self, url: str | None = None, api_key: str | None = None, timeout: float = 300.0):
        self.api = connect(url, api_key, timeout)
        self._transport = AsyncTransport(self.api.get_async_httpx_client)
        self.sandboxes = AsyncSandboxes(self)
        self.rollouts = AsyncRollouts(self)
        self.jobs = AsyncJobs(self)
        self.snapshots = AsyncSnapshots(self)
        self.layers = AsyncLayers(self)
        self.environments = AsyncEnvironments(self)
        self.nodes = AsyncNodes(self)
        self.admin = AsyncAdmin(self)
        self._usage = AsyncUsage(self)
        self.images = AsyncImages(self)

    @property
    def http(self) -> httpx.AsyncClient:
        """The underlying httpx client (auth set), for raw and streaming calls."""
        return self.api.get_async_httpx_client()

    async def usage(self) -> dict:
        """Your tenant's usage: ``current`` (live sandboxes, image bytes) and ``totals`` (billing)."""
        return await self._usage.usage()

    async def close(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> "AsyncCorral":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
