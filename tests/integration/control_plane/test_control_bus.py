"""EventBus against a real RabbitMQ: confirms, ack after effect, re-delivery, trace headers."""

import asyncio
import uuid

import pytest

from corral_common.amqp import EventBus
from corral_common.events import SandboxStop


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
