"""Hot state in Redis: sandbox records, node heartbeats and capacity reservations.

Redis holds what must be read fast and can be rebuilt; SQL keeps terminal history. Every
state change is a compare-and-set in a Lua script, so two services racing on one sandbox
(the scheduler's node-lost reaper and a node-agent reporting, say) cannot both win.

``StateStore`` is one object over one Redis, made of its parts: sandbox records and their
transitions (state_sandboxes.py, the record itself in state_records.py), nodes (state_nodes.py) and
reservations (state_reservations.py).
"""

import redis.asyncio as aioredis

from corral_common.store.redis_client import connect
from corral_common.store.state_nodes import NodeDirectory
from corral_common.store.state_reservations import Reservations
from corral_common.store.state_sandboxes import SandboxRecords


class StateStore(SandboxRecords, NodeDirectory, Reservations):
    def __init__(self, redis: aioredis.Redis):
        SandboxRecords.__init__(self, redis)
        NodeDirectory.__init__(self, redis)
        Reservations.__init__(self, redis)

    @classmethod
    def from_url(cls, url: str, *, max_connections: int = 100, pool_timeout_s: float = 5.0) -> "StateStore":
        """On a bounded pool that survives a Redis restart (``corral_common.store.redis_client``)."""
        return cls(connect(url, max_connections=max_connections, pool_timeout_s=pool_timeout_s))

    async def ping(self) -> None:
        """Whether Redis answers (raises when it does not)."""
        await self.redis.ping()

    async def close(self) -> None:
        await self.redis.aclose()
