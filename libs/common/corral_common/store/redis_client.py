"""The one way services open Redis: a client that survives a Redis restart.

redis-py's from_url gives connections no retry at all, so after a restart every pooled
connection (each a socket the old server closed) failed one command: a 500 per stale
connection in the api, a failed heartbeat or placement elsewhere. Here a command that
meets a closed connection or a timeout reconnects and is sent again, a few times with a
short backoff. Every command Corral sends is safe to repeat (compare-and-set scripts,
reservations idempotent per sandbox, set adds).

The pool is bounded: past ``max_connections`` a caller waits at most ``pool_timeout_s`` for a
free connection, then gets redis' ConnectionError, which every service answers with a 503
(corral_common.web.overload). Waiting for the pool is not retried (it happens before the command).
"""

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

RETRIES = 4  # ~0.05 + 0.1 + 0.2 + 0.4 s at most: a restart's stale sockets, not a long outage


def connect(url: str, *, max_connections: int = 100, pool_timeout_s: float = 5.0,
            decode_responses: bool = True) -> aioredis.Redis:
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=pool_timeout_s, decode_responses=decode_responses,
        retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), RETRIES),
        retry_on_error=[RedisConnectionError, RedisTimeoutError])
    return aioredis.Redis.from_pool(pool)
