"""Uploads the api passes on to a node-agent or image-service, counted as they stream.

(The node-agent's client is ``corral_common.contracts.node_client.NodeAgentClient``.)"""

from collections.abc import AsyncIterator

from corral_common.errors import PayloadTooLarge


async def capped(stream: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    """Passes an upload through, failing once it grows past ``limit`` bytes."""
    seen = 0
    async for chunk in stream:
        seen += len(chunk)
        if seen > limit:
            raise PayloadTooLarge(f"upload exceeds {limit} bytes", loc=["body"])
        yield chunk
