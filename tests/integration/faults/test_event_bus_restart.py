"""The EventBus across a restart of a RabbitMQ of the test's own: consumers come back on their
own; a publish while it is down waits its bound and then fails (BrokerUnavailable), or, for
the events of a state change already made, is kept and sent in order once it is back."""

import asyncio
import time
import uuid

import pytest

from corral_common.amqp import BrokerUnavailable, EventBus
from corral_common.contracts.events import SandboxStop
from tests.polling import until


async def test_consumers_come_back_and_deferred_events_are_sent_in_order(private_broker):
    broker = private_broker
    bus = await EventBus(broker.url, publish_timeout_s=0.5).connect()
    got: list[str] = []

    async def handler(event: SandboxStop) -> None:
        got.append(event.sandbox_id)

    key = f"test.k.{uuid.uuid4().hex[:8]}"
    try:
        await bus.consume(f"test.q.{uuid.uuid4().hex[:8]}", [key], SandboxStop, handler)
        await bus.publish(key, SandboxStop(sandbox_id="before", node_id="n"))
        await until(lambda: got == ["before"], timeout_s=10, what="the first event")

        await asyncio.to_thread(broker.stop)
        started = time.monotonic()
        with pytest.raises(BrokerUnavailable):
            await bus.publish(key, SandboxStop(sandbox_id="refused", node_id="n"))
        assert 0.5 <= time.monotonic() - started < 5  # it waited its bound, no more
        await bus.publish(key, SandboxStop(sandbox_id="terminal", node_id="n"), defer_on_outage=True)
        await bus.publish(key, SandboxStop(sandbox_id="wake-up", node_id="n"), confirm=False, defer_on_outage=True)
        assert bus.deferred == 2
        await asyncio.to_thread(broker.start)

        await until(lambda: bus.deferred == 0, timeout_s=60, what="the deferred events sent")
        await until(lambda: {"terminal", "wake-up"} <= set(got), timeout_s=30, what="the deferred events consumed")
        # In order, the refused one never sent. (A confirm that took longer than the bound is
        # sent again: a duplicate, which consumers absorb like a redelivery.)
        assert list(dict.fromkeys(got)) == ["before", "terminal", "wake-up"], got
        await bus.publish(key, SandboxStop(sandbox_id="after", node_id="n"))
        await until(lambda: got[-1:] == ["after"], timeout_s=10, what="an event after the restart")
    finally:
        await bus.close()
