"""Overload is an answer, never a 500: the one table of exceptions that mean "a bounded wait
ran out" or "a backing service is not answering" (Redis, RabbitMQ, the SQL database), and the
503 each becomes.

Every pool a service draws from is bounded and waits a bounded time (``redis_pool_timeout_s``,
``http_pool_timeout_s``, ``db_pool_timeout_s``): when the wait runs out the pool raises, and the
route's caller gets ``503`` with ``Retry-After`` and the JSON error body. No route catches these
itself; ``corral_common.web.handlers.install_error_handlers`` installs this table in every service.
"""

from collections.abc import Callable

import aiormq.exceptions
import httpx
import redis.exceptions
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from corral_common.web.errors import Overloaded, ServiceUnavailable

# redis-py's words when a BlockingConnectionPool's wait ran out / a plain pool is full.
_REDIS_POOL_EXHAUSTED = ("No connection available", "Too many connections")


def _redis(exc: Exception) -> ServiceUnavailable:
    if isinstance(exc, redis.exceptions.MaxConnectionsError) or str(exc).startswith(_REDIS_POOL_EXHAUSTED):
        return Overloaded("no free Redis connection in time; retry shortly")
    return ServiceUnavailable(f"Redis is not answering ({type(exc).__name__})", code="redis_unavailable")


def _http_pool(_: Exception) -> ServiceUnavailable:
    return Overloaded("no free connection to an internal service in time; retry shortly")


def _sql_pool(_: Exception) -> ServiceUnavailable:
    return Overloaded("no free SQL connection in time; retry shortly")


def _sql_down(exc: Exception) -> ServiceUnavailable:
    # A connection refused, reset or closed mid-query (a database restart); pool_pre_ping
    # replaces stale connections at checkout, so the next request after it is back works.
    return ServiceUnavailable(f"the database is not answering ({type(exc).__name__}); retry shortly",
                              code="database_unavailable")


def _broker(exc: Exception) -> ServiceUnavailable:
    return ServiceUnavailable(f"RabbitMQ is not answering ({type(exc).__name__}); retry shortly",
                              code="broker_unavailable")


# exception class -> the 503 it becomes (the most specific class wins, as Starlette looks handlers up).
OVERLOAD_ERRORS: dict[type[Exception], Callable[[Exception], ServiceUnavailable]] = {
    redis.exceptions.ConnectionError: _redis,  # includes MaxConnectionsError and the pool's timeout
    redis.exceptions.TimeoutError: _redis,
    httpx.PoolTimeout: _http_pool,
    # The broker went away under a call that does not ride it out (publishes do: BrokerUnavailable).
    aiormq.exceptions.AMQPConnectionError: _broker,
    aiormq.exceptions.ChannelInvalidStateError: _broker,
}
try:  # the services without SQL (scheduler, node-agent, memory-manager) need not have SQLAlchemy
    import sqlalchemy.exc

    OVERLOAD_ERRORS[sqlalchemy.exc.TimeoutError] = _sql_pool  # QueuePool's pool_timeout ran out
    OVERLOAD_ERRORS[sqlalchemy.exc.OperationalError] = _sql_down
    OVERLOAD_ERRORS[sqlalchemy.exc.InterfaceError] = _sql_down
except ImportError:  # pragma: no cover - every image installs it today
    pass


def as_unavailable(exc: Exception) -> ServiceUnavailable | None:
    """The 503 for ``exc`` if the table has a row for one of its classes, else None."""
    for cls in type(exc).__mro__:
        if cls in OVERLOAD_ERRORS:
            return OVERLOAD_ERRORS[cls](exc)
    return None


def is_unavailable(exc: BaseException) -> bool:
    """A 503 kind of failure (a backing service away, a bounded wait run out): worth trying the
    same thing again soon, unlike a bug or bad input."""
    return isinstance(exc, ServiceUnavailable) or (isinstance(exc, Exception) and as_unavailable(exc) is not None)


def install_overload_handlers(app: FastAPI) -> None:
    async def _overloaded(_: Request, exc: Exception) -> JSONResponse:
        error = as_unavailable(exc)
        assert error is not None
        return JSONResponse(error.to_body(), status_code=error.status_code, headers=error.response_headers())

    for cls in OVERLOAD_ERRORS:
        app.add_exception_handler(cls, _overloaded)

