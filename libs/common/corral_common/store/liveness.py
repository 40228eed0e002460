"""A node's liveness score as its agent's pulse thread refreshes it (node-agent events/pulse.py):
one synchronous write, on a client of the thread's own, so a busy event loop cannot delay it.

The score lives in the ``nodes`` zset that ``StateStore.heartbeat`` writes and the scheduler's
reaper reads (``StateStore.stale_nodes``)."""

import time

import redis


def refresh_node_score(client: redis.Redis, node_id: str) -> None:
    """Set the node's score to now if the node is there; never add it (``ZADD XX``): a node the
    reaper forgot or Redis lost comes back only with its full heartbeat."""
    client.zadd("nodes", {node_id: time.time()}, xx=True)
