"""EventBus against a real RabbitMQ: confirms, ack after effect, re-delivery, trace headers."""

import asyncio
import uuid

import pytest

from corral_common.amqp import EventBus
from corral_common.contracts.events import SandboxStop


@pytest.fixture
async def bus(amqp_url):
    b = await EventBus(amqp_url).connect()
    yield b
    await b.close()


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:8]}"


async def test_publish_then_consume(bus):
    queue, key = unique("test.q"), unique("test.k")
    got: asyncio.Queue = asyncio.Queue()

    async def handler(event: SandboxStop) -> None:
        await got.put(event)

    await bus.consume(queue, [key], SandboxStop, handler)
    await bus.publish(key, SandboxStop(sandbox_id="sb-1", node_id="n1"))
    event = await asyncio.wait_for(got.get(), 10)
    assert event.sandbox_id == "sb-1"


async def test_failed_handler_gets_the_message_again(bus):
    queue, key = unique("test.q"), unique("test.k")
    attempts: list[str] = []
    done = asyncio.Event()

    async def flaky(event: SandboxStop) -> None:
        attempts.append(event.event_id)
        if len(attempts) < 3:
            raise RuntimeError("transient")
        done.set()

    await bus.consume(queue, [key], SandboxStop, flaky)
    sent = SandboxStop(sandbox_id="sb-2", node_id="n1")
    await bus.publish(key, sent)
    await asyncio.wait_for(done.wait(), 15)
    assert attempts == [sent.event_id] * 3


async def test_unacked_message_survives_consumer_loss(amqp_url):
    """A consumer that dies before acking does not lose the message: the next one gets it."""
    queue, key = unique("test.q"), unique("test.k")
    first = await EventBus(amqp_url).connect()
    started = asyncio.Event()

    async def never_finishes(event: SandboxStop) -> None:
        started.set()
        await asyncio.Event().wait()

    await first.consume(queue, [key], SandboxStop, never_finishes)
    await first.publish(key, SandboxStop(sandbox_id="sb-3", node_id="n1"))
    await asyncio.wait_for(started.wait(), 10)
    await first.close()  # dies mid-handler

    second = await EventBus(amqp_url).connect()
    got: asyncio.Queue = asyncio.Queue()

    async def handler(event: SandboxStop) -> None:
        await got.put(event.sandbox_id)

    await second.consume(queue, [key], SandboxStop, handler)
    assert await asyncio.wait_for(got.get(), 10) == "sb-3"
    await second.close()


async def test_malformed_message_is_dropped_not_looped(bus):
    import aio_pika

    queue, key = unique("test.q"), unique("test.k")
    got: asyncio.Queue = asyncio.Queue()

    async def handler(event: SandboxStop) -> None:
        await got.put(event.sandbox_id)

    await bus.consume(queue, [key], SandboxStop, handler)
    await bus._exchange.publish(aio_pika.Message(body=b"{not json"), routing_key=key)
    await bus.publish(key, SandboxStop(sandbox_id="after", node_id="n1"))
    assert await asyncio.wait_for(got.get(), 10) == "after"


async def test_a_handler_whose_backing_service_is_away_runs_again_beyond_the_delivery_limit(bus, monkeypatch):
    """Redis or the database away is not a poison message: the handler runs again, holding
    the message, more times than the quorum queue's delivery limit (20) would redeliver it."""
    import redis.exceptions

    import corral_common.amqp

    monkeypatch.setattr(corral_common.amqp, "HANDLER_RETRY_MAX_S", 0.02)
    queue, key = unique("test.q"), unique("test.k")
    attempts: list[str] = []
    done = asyncio.Event()

    async def redis_away(event: SandboxStop) -> None:
        attempts.append(event.event_id)
        if len(attempts) <= 25:
            raise redis.exceptions.ConnectionError("Connection refused")
        done.set()

    await bus.consume(queue, [key], SandboxStop, redis_away)
    sent = SandboxStop(sandbox_id="sb-4", node_id="n1")
    await bus.publish(key, sent)
    await asyncio.wait_for(done.wait(), 30)
    assert attempts == [sent.event_id] * 26


async def test_a_classic_queue_of_an_older_version_is_kept_while_used_then_made_quorum(amqp_url):
    import aio_pika

    from corral_common.amqp import QUORUM_ARGS, connect, declare_quorum_queue

    name = unique("test.classic")
    connection = await connect(amqp_url)
    try:
        older = await connection.channel()
        classic = await older.declare_queue(name, durable=True)  # as the fncall queues were made

        async def ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            pass

        tag = await classic.consume(ignore)
        # An older consumer still uses it: kept (declared passively), and it still takes calls.
        kept = await declare_quorum_queue(connection, await connection.channel(), name)
        assert (await kept.declare()).consumer_count == 1
        await classic.cancel(tag)
        # Unused and empty: converted; a quorum declare with the same arguments now agrees.
        await declare_quorum_queue(connection, await connection.channel(), name)
        probe = await connection.channel()
        await probe.declare_queue(name, durable=True, arguments=QUORUM_ARGS)
        await probe.queue_delete(name)
    finally:
        await connection.close()
