"""Request/reply over RabbitMQ work queues: the api publishes a call on ``fncall.<runtime>``
(competing node consumers) with ``reply_to`` = this process's exclusive reply queue and a
``correlation_id``, and awaits the reply. A call not picked up before its deadline expires
in the queue (per-message TTL), so a worker never runs work nobody waits for.

Batches send their calls in bundles (message ``type`` "bundle", body ``{"jobs": [...]}``,
one reply ``{"results": [...]}``): per call that is a fraction of the broker's and both ends'
per-message work. A node runs a bundle's calls on its free workers at once. The messages are
the fncall contract's models (corral_common.contracts.fncall).

Across a broker restart nothing is lost (docs/architecture.md, "Broker restarts"): the work
queues are quorum queues, the call is published with the broker's confirm (waiting for a
reconnect up to ``publish_timeout_s``, then ``BrokerUnavailable``: a 503), and the reply
queue is this process's own durable quorum queue, consumed with acks, so a reply the
broker held when it went down is delivered after it is back. A call whose node lost its
connection mid-run is run again (calls are pure: the same code on the same input), and the
second reply of a call is ignored. The reply queue expires ``REPLY_QUEUE_EXPIRES_MS`` after
its api process stopped consuming it.
"""

import asyncio
import uuid
from contextlib import suppress

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue, AbstractRobustConnection

from corral_common.amqp import PUBLISH_TIMEOUT_S, connect, declare_quorum_queue, publish_bounded, settle
from corral_common.contracts.fncall import (
    BUNDLE,
    FncallJob,
    FncallResult,
    JobBundle,
    ResultBundle,
    declare_work_queue,
    queue_name,
)
from corral_common.logging import get_logger

log = get_logger(__name__)

REPLY_QUEUE_PREFIX = "fncall.replies."
REPLY_QUEUE_EXPIRES_MS = 2 * 60 * 1000  # unused that long: its api process is gone (a reconnect takes seconds)
REPLY_PREFETCH = 1024


class RpcTimeout(Exception):
    pass


class FncallRpc:
    def __init__(self, amqp_url: str, runtimes: tuple[str, ...], *, publish_timeout_s: float = PUBLISH_TIMEOUT_S):
        self.amqp_url = amqp_url
        self.runtimes = runtimes
        self.publish_timeout_s = publish_timeout_s
        self._connection: AbstractRobustConnection | None = None
        self._channel: AbstractChannel | None = None
        self._reply_queue: AbstractQueue | None = None
        self._pending: dict[str, asyncio.Future] = {}
        self._queues: dict[str, AbstractQueue] = {}

    async def connect(self) -> "FncallRpc":
        self._connection = await connect(self.amqp_url)
        self._channel = await self._connection.channel(publisher_confirms=True)
        await self._channel.set_qos(prefetch_count=REPLY_PREFETCH)
        for runtime in self.runtimes:
            self._queues[runtime] = await declare_work_queue(self._connection, self._channel, runtime)
        self._reply_queue = await declare_quorum_queue(
            self._connection, self._channel, f"{REPLY_QUEUE_PREFIX}{uuid.uuid4().hex}",
            arguments={"x-expires": REPLY_QUEUE_EXPIRES_MS})
        await self._reply_queue.consume(self._on_reply)
        return self

    async def close(self) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.cancel()
        if self._connection is not None:
            with suppress(Exception):
                await self._connection.close()

    async def _on_reply(self, message: AbstractIncomingMessage) -> None:
        fut = self._pending.get(message.correlation_id or "")
        if fut is not None and not fut.done():  # else the caller gave up, or a re-run answered twice
            fut.set_result(message.body)
        await settle(message.ack, queue=self._reply_queue.name if self._reply_queue else "")

    async def call(self, runtime: str, job: FncallJob, timeout_s: float) -> FncallResult:
        """One call: the worker's result."""
        body = await self._request(runtime, job.body(), job.call_id or uuid.uuid4().hex, timeout_s)
        return FncallResult.model_validate_json(body)

    async def call_bundle(self, runtime: str, jobs: list[FncallJob], timeout_s: float) -> list[FncallResult]:
        """Several calls in one message: their results, in the same order."""
        reply = await self._request(runtime, JobBundle(jobs=jobs).body(), uuid.uuid4().hex, timeout_s, kind=BUNDLE)
        results = ResultBundle.model_validate_json(reply).results
        if len(results) != len(jobs):
            raise ValueError(f"a bundle of {len(jobs)} calls was answered with {len(results)} results")
        return results

    async def _request(self, runtime: str, body: bytes, correlation_id: str, timeout_s: float,
                       kind: str | None = None) -> bytes:
        assert self._channel is not None and self._reply_queue is not None, "connect() first"
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = fut
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            await publish_bounded(
                self._channel.default_exchange,
                aio_pika.Message(body=body, content_type="application/json", type=kind,
                                 correlation_id=correlation_id, reply_to=self._reply_queue.name,
                                 expiration=timeout_s, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                queue_name(runtime), timeout_s=min(self.publish_timeout_s, timeout_s))
            try:
                return await asyncio.wait_for(fut, max(deadline - loop.time(), 0.001))
            except (TimeoutError, asyncio.TimeoutError):
                raise RpcTimeout(f"no worker answered within {timeout_s:.0f}s") from None
        finally:
            self._pending.pop(correlation_id, None)

    async def consumers(self, runtime: str) -> int:
        """Workers consuming ``runtime``'s queue, as the broker counts them now."""
        return (await self._queues[runtime].declare()).consumer_count or 0

    async def queue_depths(self) -> dict[str, int]:
        depths = {}
        for runtime, queue in self._queues.items():
            # declare() again for fresh counts (aio-pika hands back a cached Queue otherwise)
            depths[runtime] = (await queue.declare()).message_count or 0
        return depths
