"""The one table of overload exceptions: each is a 503 with Retry-After and the JSON error
body in every service (install_error_handlers), whichever route raised it; 429/503 raised as
CorralErrors carry Retry-After too."""

import aiormq.exceptions
import httpx
import pytest
import redis.exceptions
import sqlalchemy.exc
from fastapi import FastAPI
from fastapi.testclient import TestClient

from corral_common.amqp import BrokerUnavailable
from corral_common.web.errors import CorralError, NotFound, ServiceUnavailable, TooManyRequests
from corral_common.web.handlers import install_error_handlers
from corral_common.web.overload import is_unavailable

RAISED = {
    "redis-pool-wait": (redis.exceptions.ConnectionError("No connection available."), "overloaded"),
    "redis-pool-full": (redis.exceptions.MaxConnectionsError("Too many connections"), "overloaded"),
    "redis-down": (redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379."), "redis_unavailable"),
    "redis-timeout": (redis.exceptions.TimeoutError("Timeout reading from socket"), "redis_unavailable"),
    "http-pool": (httpx.PoolTimeout("no connection"), "overloaded"),
    "sql-pool": (sqlalchemy.exc.TimeoutError("QueuePool limit of size 10 overflow 20 reached"), "overloaded"),
    "sql-down": (sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("connection refused")),
                 "database_unavailable"),
    "sql-closed": (sqlalchemy.exc.InterfaceError("SELECT 1", {}, Exception("connection already closed")),
                   "database_unavailable"),
    "broker-down": (aiormq.exceptions.AMQPConnectionError("connection reset"), "broker_unavailable"),
    "broker-channel": (aiormq.exceptions.ChannelInvalidStateError("No active transport in channel"),
                       "broker_unavailable"),
    "broker-publish": (BrokerUnavailable("RabbitMQ did not take the message within 20s"), "broker_unavailable"),
    "unavailable": (ServiceUnavailable("image-service unreachable"), "unavailable"),
    "node-503": (CorralError("node says no", status_code=503, code="unavailable"), "unavailable"),
    "tenant": (TooManyRequests("slow down", retry_after_s=3), "too_many_requests"),
}


@pytest.fixture(scope="module")
def client():
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/raise/{name}")
    async def _raise(name: str):
        raise RAISED[name][0]

    @app.get("/missing")
    async def _missing():
        raise NotFound("nothing here")

    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("name", sorted(RAISED))
def test_each_overload_is_a_json_answer_with_retry_after(client, name):
    r = client.get(f"/raise/{name}")
    expected_status = 429 if name == "tenant" else 503
    assert r.status_code == expected_status and r.headers["content-type"] == "application/json"
    assert r.json()["error"]["code"] == RAISED[name][1]
    assert r.headers["Retry-After"] == ("3" if name == "tenant" else "1")


def test_other_errors_say_nothing_about_retrying(client):
    r = client.get("/missing")
    assert r.status_code == 404 and "Retry-After" not in r.headers


def test_what_is_worth_trying_again():
    """A consumer retries its handler in place for these (corral_common.amqp), not for bugs."""
    for name in ("redis-down", "sql-down", "broker-down", "broker-publish", "unavailable", "sql-pool"):
        assert is_unavailable(RAISED[name][0]), name
    assert not is_unavailable(ValueError("bad message"))
    assert not is_unavailable(NotFound("gone"))
    assert not is_unavailable(sqlalchemy.exc.IntegrityError("INSERT", {}, Exception("duplicate key")))
