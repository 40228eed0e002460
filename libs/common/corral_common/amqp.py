"""RabbitMQ plumbing shared by the services (aio-pika).

Durable topic exchange, durable quorum queues, persistent messages published with
confirms, and consumers that ack only after their handler's effect is done. A handler that
raises gets its message re-queued; the quorum queue's delivery limit stops a poison message
from looping forever. A handler that raises because Redis, the database or the broker is away
(``is_unavailable``) is not a poison message: it runs again, with a backoff, holding its message.

Across a broker restart (docs/architecture.md, "Broker restarts"): the connection is robust
(aio-pika reconnects every ``RECONNECT_INTERVAL_S`` and re-declares the channels, exchanges,
queues, bindings and consumers it had), quorum queues keep their messages, and a message
in a handler when the connection dropped is delivered again (its ack cannot reach the
broker any more), so every handler is idempotent. A publish made while the connection is
down waits for it to come back and is sent again, up to ``publish_timeout_s``; then it
raises ``BrokerUnavailable`` (a 503 with Retry-After for an HTTP caller), never drops the
message silently. A lost confirm may mean the broker has the message after all: the retry
can duplicate it, which consumers absorb like any redelivery.
"""

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aio_pika
import aiormq.exceptions
from aio_pika.abc import (
    AbstractChannel,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustChannel,
    AbstractRobustConnection,
)
from aio_pika.exceptions import CONNECTION_EXCEPTIONS
from pydantic import BaseModel

from corral_common.contracts.events import EXCHANGE
from corral_common.logging import get_logger
from corral_common.telemetry import consume_span, inject_headers, tracer
from corral_common.web.errors import ServiceUnavailable
from corral_common.web.overload import is_unavailable

log = get_logger(__name__)
E = TypeVar("E", bound=BaseModel)

QUORUM_ARGS = {"x-queue-type": "quorum", "x-delivery-limit": 20}
# aio-pika's default is 5 s between attempts: most of a broker restart's outage.
RECONNECT_INTERVAL_S = 1.0
# How long a publish waits for the broker by default (services pass amqp_publish_timeout_s).
PUBLISH_TIMEOUT_S = 20.0
# State-change events kept in memory while the broker is away (see EventBus.publish).
MAX_DEFERRED = 100_000
# A handler whose backing service is away runs again after 0.2, 0.4, ... up to this many seconds.
HANDLER_RETRY_MAX_S = 5.0
# What a publish, ack or declare raises when the connection or channel went away.
BROKER_ERRORS = (*CONNECTION_EXCEPTIONS, TimeoutError)


class BrokerUnavailable(ServiceUnavailable):
    """RabbitMQ did not take a message within the publish bound: nothing was sent (503)."""

    code = "broker_unavailable"


async def connect(url: str) -> AbstractRobustConnection:
    """The one way services connect: robust, retrying every ``RECONNECT_INTERVAL_S``."""
    return await aio_pika.connect_robust(url, reconnect_interval=RECONNECT_INTERVAL_S)


async def publish_bounded(exchange: AbstractExchange, message: aio_pika.Message, routing_key: str, *,
                            timeout_s: float) -> None:
    """Publish (on a channel with confirms: and wait for the broker to have it), riding out a
    reconnect: while the connection is down, wait for aio-pika to restore the channel and send
    again, with a short backoff, for up to ``timeout_s``; then ``BrokerUnavailable``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    delay = 0.05
    channel = exchange.channel
    while True:
        try:
            async with asyncio.timeout(max(deadline - loop.time(), 0.001)):
                if isinstance(channel, AbstractRobustChannel):
                    await channel.ready()  # the connection is back and the channel restored
                await exchange.publish(message, routing_key=routing_key)
            return
        except BROKER_ERRORS as exc:
            error = exc
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise BrokerUnavailable(f"RabbitMQ did not take the message within {timeout_s:g}s "
                                    f"({type(error).__name__}); nothing was sent") from error
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, 1.0)


async def settle(action: Callable[[], Awaitable[Any]], **context: Any) -> None:
    """Ack, nack or reject a message; on a channel that is gone the broker has re-queued the
    message already (it is delivered again, and handlers are idempotent): log, do not raise."""
    try:
        await action()
    except BROKER_ERRORS as exc:
        log.info("amqp.settle_lost", error=type(exc).__name__, **context)


async def declare_quorum_queue(connection: AbstractRobustConnection, channel: AbstractChannel, name: str,
                               arguments: dict[str, Any] | None = None) -> AbstractQueue:
    """Declare ``name`` as a durable quorum queue on ``channel``.

    A queue's type cannot change in place. One an older Corral declared classic (the fncall
    work queues were) is deleted and made again as quorum when nothing consumes it and it is
    empty; while older services still use it, it is kept as it is (declared passively: its
    messages are persistent, so it survives a single broker's restart too) and a warning says
    so; the next start of any service once those are gone converts it."""
    args = {**QUORUM_ARGS, **(arguments or {})}
    if await _quorum_or_converted(connection, name, args):
        return await channel.declare_queue(name, durable=True, arguments=args)
    log.warning("amqp.classic_queue_kept", queue=name,
                hint="an older service still uses it; it becomes a quorum queue at the first start of a "
                     "service once it is unused and empty (or: rabbitmqctl delete_queue " + name + ")")
    return await channel.declare_queue(name, passive=True)


async def _quorum_or_converted(connection: AbstractRobustConnection, name: str, args: dict[str, Any]) -> bool:
    # Probed on bare channels: a refused declare or delete closes the channel it was sent on,
    # and the robust channels would take that for an outage.
    await connection.ready()
    raw = connection.transport.connection
    probe = await raw.channel()
    try:
        await probe.queue_declare(name, durable=True, arguments=args)
        return True
    except aiormq.exceptions.ChannelPreconditionFailed as exc:
        if "inequivalent arg 'x-queue-type'" not in str(exc):
            raise
    finally:
        await _close_quietly(probe)
    probe = await raw.channel()
    try:
        await probe.queue_delete(name, if_unused=True, if_empty=True)
    except aiormq.exceptions.ChannelPreconditionFailed:
        return False  # consumed or not empty
    finally:
        await _close_quietly(probe)
    probe = await raw.channel()
    try:
        await probe.queue_declare(name, durable=True, arguments=args)
    finally:
        await _close_quietly(probe)
    log.info("amqp.queue_converted", queue=name, to="quorum")
    return True


def _channel_gone(message: AbstractIncomingMessage) -> bool:
    try:
        message.channel  # noqa: B018 - the property raises once the channel is closed
    except aiormq.exceptions.ChannelInvalidStateError:
        return True
    return False


async def _close_quietly(channel: aiormq.abc.AbstractChannel) -> None:
    if not channel.is_closed:
        try:
            await channel.close()
        except BROKER_ERRORS:
            pass


class EventBus:
    def __init__(self, url: str, *, publish_timeout_s: float = PUBLISH_TIMEOUT_S):
        self.url = url
        self.publish_timeout_s = publish_timeout_s
        self._connection: AbstractRobustConnection | None = None
        self._publish_channel: AbstractRobustChannel | None = None
        self._exchange: aio_pika.abc.AbstractExchange | None = None
        self._fast_exchange: aio_pika.abc.AbstractExchange | None = None
        self._consume_channels: list[AbstractRobustChannel] = []
        # State-change events that found no broker: (routing key, message, confirm), in order.
        self._deferred: deque[tuple[str, aio_pika.Message, bool]] = deque()
        self._drainer: asyncio.Task | None = None

    async def connect(self) -> "EventBus":
        self._connection = await connect(self.url)
        self._publish_channel = await self._connection.channel(publisher_confirms=True)
        self._exchange = await self._publish_channel.declare_exchange(
            EXCHANGE, aio_pika.ExchangeType.TOPIC, durable=True
        )
        fast_channel = await self._connection.channel(publisher_confirms=False)
        self._fast_exchange = await fast_channel.declare_exchange(EXCHANGE, aio_pika.ExchangeType.TOPIC, durable=True)
        return self

    async def close(self) -> None:
        if self._drainer is not None:
            self._drainer.cancel()
            await asyncio.gather(self._drainer, return_exceptions=True)
        if self._deferred:
            log.error("event.deferred_dropped", events=len(self._deferred),
                      routing_keys=sorted({key for key, _, _ in self._deferred})[:10])
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    @property
    def deferred(self) -> int:
        """State-change events waiting for the broker to come back."""
        return len(self._deferred)

    async def publish(self, routing_key: str, event: BaseModel, headers: dict[str, Any] | None = None, *,
                      confirm: bool = True, defer_on_outage: bool = False) -> None:
        """Publish; with ``confirm`` wait for the broker to have it (a 202 is never answered for a
        lost request). Without, the message is still persistent but the caller does not wait.

        While the broker is away a publish waits up to ``publish_timeout_s`` for it (see the
        module docstring), then raises ``BrokerUnavailable``. With ``defer_on_outage`` (the
        events of a state change that is already made in Redis: failing the caller would not
        undo it) it queues the event in this process instead and sends it, in order, once the
        broker is back; an unconfirmed one does not wait first."""
        assert self._exchange is not None and self._fast_exchange is not None, "EventBus.connect() first"
        with tracer("corral.amqp").start_as_current_span(f"publish {routing_key}"):
            message = aio_pika.Message(
                body=event.model_dump_json().encode(),
                content_type="application/json",
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                message_id=getattr(event, "event_id", None),
                headers=inject_headers(headers),
            )
            if defer_on_outage and (self._deferred or (not confirm and self._fast_exchange.channel.is_closed)):
                self._defer(routing_key, message, confirm)  # behind the ones already waiting
                return
            try:
                await self._send(routing_key, message, confirm)
            except BrokerUnavailable:
                if not defer_on_outage:
                    raise
                self._defer(routing_key, message, confirm)

    async def _send(self, routing_key: str, message: aio_pika.Message, confirm: bool) -> None:
        exchange = self._exchange if confirm else self._fast_exchange
        assert exchange is not None
        await publish_bounded(exchange, message, routing_key, timeout_s=self.publish_timeout_s)

    def _defer(self, routing_key: str, message: aio_pika.Message, confirm: bool) -> None:
        if len(self._deferred) >= MAX_DEFERRED:
            dropped, _, _ = self._deferred.popleft()
            log.error("event.deferred_overflow", dropped=dropped, kept=MAX_DEFERRED)
        self._deferred.append((routing_key, message, confirm))
        log.warning("event.deferred", routing_key=routing_key, waiting=len(self._deferred))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        sent = 0
        while self._deferred:
            routing_key, message, confirm = self._deferred[0]
            try:
                await self._send(routing_key, message, confirm)
            except BrokerUnavailable:
                continue  # still away: wait another bound
            self._deferred.popleft()
            sent += 1
        log.info("event.deferred_sent", events=sent)

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
        queue = await declare_quorum_queue(self._connection, channel, queue_name)
        for key in routing_keys:
            await queue.bind(exchange, routing_key=key)

        async def on_message(message: AbstractIncomingMessage) -> None:
            where = {"queue": queue_name, "routing_key": message.routing_key}
            try:
                event = model.model_validate_json(message.body)
            except Exception:  # noqa: BLE001 - malformed: nothing will ever handle it, drop it loudly
                log.error("event.malformed", queue=queue_name, body=message.body[:200].decode(errors="replace"))
                await settle(lambda: message.reject(requeue=False), **where)
                return
            attempt = 0
            while True:
                try:
                    with consume_span(f"consume {message.routing_key}", message.headers,
                                      queue=queue_name, routing_key=message.routing_key or ""):
                        await handler(event)
                    break
                except Exception as exc:
                    if not is_unavailable(exc):
                        log.exception("event.handler_failed", **where)
                        await settle(lambda: message.nack(requeue=True), **where)
                        return
                    if _channel_gone(message):
                        return  # the broker went away too: it delivers the message again
                    # Redis, the database or the broker is away: run the handler again once it
                    # is back, holding the message (a re-queue would count towards the delivery
                    # limit, and a poison message is not what this is).
                    attempt += 1
                    log.warning("event.handler_waiting", error=f"{type(exc).__name__}: {exc}"[:300],
                                attempt=attempt, **where)
                    await asyncio.sleep(min(0.1 * 2 ** attempt, HANDLER_RETRY_MAX_S))
            await settle(message.ack, **where)

        await queue.consume(on_message)

    async def subscribe(self, routing_keys: Sequence[str], model: type[E], handler: Callable[[E], Awaitable[None]]) -> None:
        """Transient notifications: a private auto-delete queue per process, no acks.

        For things that are fine to miss while the process is down (waking up local
        waiters); durable work goes through ``consume``. After a broker restart aio-pika
        declares the queue again under the same name and binds and consumes it again; what
        was published meanwhile is missed (the waiters re-read Redis anyway).
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
