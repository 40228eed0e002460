"""RabbitMQ plumbing shared by the services (aio-pika).

Durable topic exchange, durable quorum queues, persistent messages published with
confirms, and consumers that ack only after their handler's effect is done. A handler that
raises gets its message re-queued; the quorum queue's delivery limit stops a poison message
from looping forever.
"""

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aio_pika
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustChannel, AbstractRobustConnection
from pydantic import BaseModel

from corral_common.events import EXCHANGE
from corral_common.logging import get_logger
from corral_common.telemetry import consume_span, inject_headers, tracer

log = get_logger(__name__)
E = TypeVar("E", bound=BaseModel)

QUORUM_ARGS = {"x-queue-type": "quorum", "x-delivery-limit": 20}


class EventBus:
    def __init__(self, url: str):
        self.url = url
        self._connection: AbstractRobustConnection | None = None
        self._publish_channel: AbstractRobustChannel | None = None
        self._exchange: aio_pika.abc.AbstractExchange | None = None
        self._fast_exchange: aio_pika.abc.AbstractExchange | None = None
        self._consume_channels: list[AbstractRobustChannel] = []

    async def connect(self) -> "EventBus":
        self._connection = await aio_pika.connect_robust(self.url)
        self._publish_channel = await self._connection.channel(publisher_confirms=True)
        self._exchange = await self._publish_channel.declare_exchange(
            EXCHANGE, aio_pika.ExchangeType.TOPIC, durable=True
        )
        fast_channel = await self._connection.channel(publisher_confirms=False)
        self._fast_exchange = await fast_channel.declare_exchange(EXCHANGE, aio_pika.ExchangeType.TOPIC, durable=True)
        return self

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    async def publish(self, routing_key: str, event: BaseModel, headers: dict[str, Any] | None = None, *,
                      confirm: bool = True) -> None:
        """Publish; with ``confirm`` wait for the broker to have it (a 202 is never answered for a
        lost request). Without, the message is still persistent but the caller does not wait."""
        assert self._exchange is not None and self._fast_exchange is not None, "EventBus.connect() first"
        with tracer("corral.amqp").start_as_current_span(f"publish {routing_key}"):
            message = aio_pika.Message(
                body=event.model_dump_json().encode(),
                content_type="application/json",
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                message_id=getattr(event, "event_id", None),
                headers=inject_headers(headers),
            )
            exchange = self._exchange if confirm else self._fast_exchange
            await exchange.publish(message, routing_key=routing_key)

    async def consume(
        self,
        queue_name: str,
        routing_keys: Sequence[str],
        model: type[E],
        handler: Callable[[E], Awaitable[None]],
        *,
        prefetch: int = 64,
    ) -> None:
        """Bind ``queue_name`` to ``routing_keys`` and run ``handler`` for every message."""
        assert self._connection is not None, "EventBus.connect() first"
        channel = await self._connection.channel()
        await channel.set_qos(prefetch_count=prefetch)
        self._consume_channels.append(channel)
        exchange = await channel.declare_exchange(EXCHANGE, aio_pika.ExchangeType.TOPIC, durable=True)
        queue = await channel.declare_queue(queue_name, durable=True, arguments=QUORUM_ARGS)
        for key in routing_keys:
            await queue.bind(exchange, routing_key=key)

        async def on_message(message: AbstractIncomingMessage) -> None:
            try:
                event = model.model_validate_json(message.body)
            except Exception:  # noqa: BLE001 - malformed: nothing will ever handle it, drop it loudly
                log.error("event.malformed", queue=queue_name, body=message.body[:200].decode(errors="replace"))
                await message.reject(requeue=False)
                return
            try:
                with consume_span(f"consume {message.routing_key}", message.headers,
                                  queue=queue_name, routing_key=message.routing_key or ""):
                    await handler(event)
            except Exception:
                log.exception("event.handler_failed", queue=queue_name, routing_key=message.routing_key)
                await message.nack(requeue=True)
                return
            await message.ack()

        await queue.consume(on_message)

    async def subscribe(self, routing_keys: Sequence[str], model: type[E], handler: Callable[[E], Awaitable[None]]) -> None:
        """Transient notifications: a private auto-delete queue per process, no acks.

        For things that are fine to miss while the process is down (waking up local
        waiters); durable work goes through ``consume``.
        """
        assert self._connection is not None, "EventBus.connect() first"
        channel = await self._connection.channel()
        self._consume_channels.append(channel)
        exchange = await channel.declare_exchange(EXCHANGE, aio_pika.ExchangeType.TOPIC, durable=True)
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        for key in routing_keys:
            await queue.bind(exchange, routing_key=key)

        async def on_message(message: AbstractIncomingMessage) -> None:
            try:
                await handler(model.model_validate_json(message.body))
            except Exception:
                log.exception("event.subscriber_failed", routing_key=message.routing_key)

        await queue.consume(on_message, no_ack=True)
