"""Warm pools: per runtime, a set of workers taking calls from the ``fncall.<runtime>`` queue.

Every node-agent consumes from the same durable quorum queue per runtime (competing
consumers), with a prefetch equal to its pool size, so RabbitMQ hands each node at most as
many calls as it has workers and a burst waits in the queue instead of failing. (Quorum
queues take no channel-wide prefetch: the consumer's own is set, and a resize replaces the
consumer with one of the new size.) A call's reply goes to its ``reply_to`` queue with the
request's ``correlation_id``, published with the broker's confirm (riding out a reconnect up
to ``publish_timeout_s``); the message is acked only after the reply is confirmed, so a node
that dies, or loses the broker, mid-call has its calls delivered again (to any node).
A batch's calls come in bundles of several calls per message (see ``_on_message``); the
prefetch counts messages, so a node may hold up to pool-size bundles: their calls wait for
a free worker in the node (counted with the queue's backlog when the pool decides to grow).

The pool adapts within [pool_min, pool_max]: it grows while every worker is busy and calls
are waiting, and shrinks by one after ``idle_ticks_to_shrink`` ticks under 25% busy.

Its workers run on the node's runtime root (``service``), which can go away under them (the
lazy-layer server serving it died): ``suspend`` kills what runs on it and holds the next calls
(up to ``ROOT_WAIT_S``) until ``resume``, once the root is mounted again. A call that was running
on the old root, or waited longer, is answered "no worker ..." (the api's retryable 503), never
judged on a root that reads EIO.
"""

import asyncio
import time
from contextlib import suppress

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue, AbstractRobustConnection

from corral_common.amqp import BROKER_ERRORS, PUBLISH_TIMEOUT_S, BrokerUnavailable, publish_bounded, settle
from corral_common.contracts.fncall import (
    BUNDLE,
    FncallJob,
    FncallResult,
    JobBundle,
    ResultBundle,
    Verdict,
    declare_work_queue,
)
from corral_common.logging import get_logger
from corral_common.telemetry import RateWindow
from corral_node_agent.fncall import metrics
from corral_node_agent.fncall.executor import ExecutorConfig, Worker
from corral_node_agent.fncall.zygote import ZygoteWorker

log = get_logger(__name__)

# How long a call waits for its pool's runtime root to come back (``suspend``) before it is
# answered unserved: a re-mount takes a second or two; image-service down takes longer.
ROOT_WAIT_S = 30.0


class RuntimePool:
    def __init__(self, runtime: str, node_id: str, config: ExecutorConfig, connection: AbstractRobustConnection, *,
                 min_size: int, max_size: int, warm: bool = False, scale_interval_s: float = 1.0,
                 idle_ticks_to_shrink: int = 10, cgroup_prefix: str = "",
                 publish_timeout_s: float = PUBLISH_TIMEOUT_S, running: asyncio.Semaphore | None = None):
        self.runtime = runtime
        self.publish_timeout_s = publish_timeout_s
        # The node's runs at once over all its pools (FncallNodeSettings.max_running).
        self.running = running
        self.cgroup_prefix = cgroup_prefix or f"corral-fncall/{node_id}"
        self.node_id = node_id
        self.config = config
        self.connection = connection
        self.min_size = max(1, min_size)
        self.max_size = max(self.min_size, max_size)
        self.warm = warm
        self.scale_interval_s = scale_interval_s
        self.idle_ticks_to_shrink = idle_ticks_to_shrink
        self.size = 0
        self.busy = 0
        self.queue_depth = 0
        self.waiting_here = 0  # calls of bundles this node holds that wait for a free worker
        self._free: asyncio.Queue[Worker] = asyncio.Queue()
        self._workers: dict[str, Worker] = {}
        self._retire = 0  # workers to drop when they come back free
        self._next_id = 0
        self._idle_ticks = 0
        self._channel: AbstractChannel | None = None
        self._queue: AbstractQueue | None = None
        self._consumer_tag: str | None = None
        self._consuming_at = 0  # the prefetch of the current consumer
        self._scaler: asyncio.Task | None = None
        self._rate = RateWindow()
        self._labels = {"node": node_id, "runtime": runtime}
        self._root_ready = asyncio.Event()  # cleared while the runtime root is away (``suspend``)
        self._root_ready.set()
        self._root_epoch = 0  # +1 per ``suspend``: a call started before it ran on the old root

    # -- workers ------------------------------------------------------------------------------

    def _add_worker(self) -> None:
        name = f"{self.runtime}-{self._next_id}"
        self._next_id += 1
        group = f"{self.cgroup_prefix}/{name}"
        worker = (ZygoteWorker if self.warm else Worker)(self.config, name, group)
        self._workers[name] = worker
        self._free.put_nowait(worker)
        if isinstance(worker, ZygoteWorker) and self._root_ready.is_set():
            worker.prestart_soon()
        self.size += 1

    async def resize(self, target: int) -> None:
        target = max(self.min_size, min(self.max_size, target))
        if target == self.size:
            return
        if target > self.size:
            for _ in range(target - self.size):
                self._add_worker()
        else:
            drop = self.size - target
            self.size = target
            while drop and not self._free.empty():  # idle ones go now, busy ones when they finish
                self._close_worker(self._free.get_nowait())
                drop -= 1
            self._retire += drop
        await self._consume()
        metrics.POOL_SIZE.labels(**self._labels).set(self.size)
        log.info("fncall.pool_resized", runtime=self.runtime, size=self.size)

    def _close_worker(self, worker: Worker) -> None:
        self._workers.pop(worker.name, None)
        worker.close()

    def _release(self, worker: Worker) -> None:
        if self._retire:
            self._retire -= 1
            self._close_worker(worker)
            return
        if isinstance(worker, ZygoteWorker) and self._root_ready.is_set():
            worker.prestart_soon()
        self._free.put_nowait(worker)

    # -- the runtime root going away and coming back -----------------------------------------------

    def suspend(self) -> None:
        """The runtime root went away: kill every run on it (their calls are answered
        unserved) and hold new calls until ``resume``."""
        if not self._root_ready.is_set():
            return
        self._root_ready.clear()
        self._root_epoch += 1
        for worker in list(self._workers.values()):
            worker.stop_runs()
        log.warning("fncall.pool_suspended", runtime=self.runtime, busy=self.busy)

    async def resume(self) -> None:
        """The runtime root is mounted again (at the same path): forget what the workers kept
        of the old one (python's zygotes) and serve the held calls."""
        await asyncio.gather(*(worker.renew() for worker in list(self._workers.values())))
        self._root_ready.set()
        free = [self._free.get_nowait() for _ in range(self._free.qsize())]
        for worker in free:
            self._free.put_nowait(worker)
            if isinstance(worker, ZygoteWorker):
                worker.prestart_soon()
        log.info("fncall.pool_resumed", runtime=self.runtime)

    def _unserved(self, job: FncallJob, why: str) -> FncallResult:
        # "no worker": the api answers such a call 503 fncall_unavailable (send it again).
        return FncallResult(call_id=job.call_id, runtime=job.runtime, verdict=Verdict.system_error,
                            node_id=self.node_id, message=f"no worker on node {self.node_id} ran this {self.runtime} call: {why}; "
                                    "it was not judged, send it again")

    # -- queue --------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.resize(self.min_size)
        self._channel = await self.connection.channel(publisher_confirms=True)
        self._queue = await declare_work_queue(self.connection, self._channel, self.runtime)
        await self._consume()
        self._scaler = asyncio.create_task(self._scale_forever())
        log.info("fncall.pool_started", runtime=self.runtime, size=self.size, max=self.max_size, warm=self.warm)

    async def _consume(self) -> None:
        """Consume with a prefetch of the pool's size: a new consumer first, then the old one
        cancelled (its unacked calls still run and are acked on this channel)."""
        if self._channel is None or self._queue is None or self._consuming_at == self.size:
            return
        old, self._consuming_at = self._consumer_tag, self.size
        await self._channel.set_qos(prefetch_count=self.size)  # for consumers made from now on
        self._consumer_tag = await self._queue.consume(self._on_message)
        if old is not None:
            await self._queue.cancel(old)

    async def close(self) -> None:
        if self._scaler:
            self._scaler.cancel()
            with suppress(asyncio.CancelledError):
                await self._scaler
        if self._channel is not None:
            with suppress(Exception):
                await self._channel.close()
        for worker in list(self._workers.values()):
            self._workers.pop(worker.name, None)
            await worker.aclose()

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        """One call, or a bundle of calls (``type == "bundle"``, body ``{"jobs": [...]}``: the
        api's batches) that run on this pool's free workers at once and are answered with one
        reply ``{"results": [...]}`` — fewer messages per call for the broker and both ends."""
        bundle = message.type == BUNDLE
        try:
            if bundle:
                jobs = JobBundle.model_validate_json(message.body).jobs
            else:
                jobs = [FncallJob.model_validate_json(message.body)]
        except Exception as exc:  # noqa: BLE001 - a malformed job is dead-lettered, whatever broke its parse
            log.error("fncall.malformed_job", runtime=self.runtime, error=str(exc)[:200])
            await message.reject(requeue=False)
            return
        results = await asyncio.gather(*(self._run(job) for job in jobs))
        body = ResultBundle(results=results).body() if bundle else results[0].body()
        where = {"runtime": self.runtime, "call_ids": [j.call_id for j in jobs][:10]}
        if message.reply_to and self._channel is not None:
            try:
                await publish_bounded(self._channel.default_exchange, aio_pika.Message(
                    body=body, content_type="application/json", correlation_id=message.correlation_id,
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT), message.reply_to,
                    timeout_s=self.publish_timeout_s)
            except (BrokerUnavailable, *BROKER_ERRORS):
                # Not acked: the call goes back to the queue and runs again (here or elsewhere).
                log.warning("fncall.reply_failed", **where)
                await settle(lambda: message.nack(requeue=True), **where)
                return
        await settle(message.ack, **where)  # only now: a node that dies before this has its calls redelivered

    async def _run(self, job: FncallJob) -> FncallResult:
        self.waiting_here += 1
        try:
            worker = await self._free.get()
        finally:
            self.waiting_here -= 1
        if not self._root_ready.is_set():
            try:
                await asyncio.wait_for(self._root_ready.wait(), ROOT_WAIT_S)
            except (TimeoutError, asyncio.TimeoutError):
                self._release(worker)
                return self._unserved(job, f"its runtime root filesystem was not back within {ROOT_WAIT_S:.0f}s "
                                           "(the node's lazy-layer server exited)")
        epoch = self._root_epoch
        self.busy += 1
        metrics.POOL_BUSY.labels(**self._labels).set(self.busy)
        started = time.monotonic()
        try:
            if job.runtime != self.runtime:
                result = FncallResult(call_id=job.call_id, runtime=job.runtime, verdict=Verdict.system_error,
                                      message=f"job for {job.runtime} on the {self.runtime} queue")
            elif self.running is None:
                result = await worker.run_job(job)
            else:
                async with self.running:
                    result = await worker.run_job(job)
        finally:
            self.busy -= 1
            metrics.POOL_BUSY.labels(**self._labels).set(self.busy)
            self._release(worker)
        if self._root_epoch != epoch:
            result = self._unserved(job, "its runtime root filesystem went away during the run "
                                         "(the node's lazy-layer server exited)")
        result.node_id = self.node_id
        metrics.CALL_SECONDS.labels(**self._labels).observe(time.monotonic() - started)
        metrics.CALLS.labels(**self._labels, verdict=result.verdict.value).inc()
        self._rate.add()
        return result

    # -- autoscaling ----------------------------------------------------------------------------

    async def _scale_forever(self) -> None:
        while True:
            await asyncio.sleep(self.scale_interval_s)
            try:
                await self.scale_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("fncall.scale_failed", runtime=self.runtime)

    async def scale_once(self) -> None:
        if self._queue is not None:
            # Re-declare for fresh counts: aio-pika returns a channel's cached Queue (stale counts).
            declared = await self._queue.declare()
            self.queue_depth = declared.message_count or 0
        metrics.QUEUE_DEPTH.labels(runtime=self.runtime).set(self.queue_depth)
        metrics.CALLS_PER_SECOND.labels(**self._labels).set(self._rate.rate())
        metrics.POOL_WARM.labels(**self._labels).set(
            sum(1 for w in self._workers.values() if isinstance(w, ZygoteWorker) and w.is_warm()))
        target = self.decide(self.size, self.busy, self.queue_depth + self.waiting_here)
        if target > self.size:
            self._idle_ticks = 0
            await self.resize(target)
        elif self.busy < max(1, self.size / 4) and self.size > self.min_size:
            self._idle_ticks += 1
            if self._idle_ticks >= self.idle_ticks_to_shrink:
                self._idle_ticks = 0
                await self.resize(self.size - 1)
        else:
            self._idle_ticks = 0

    def decide(self, size: int, busy: int, waiting: int) -> int:
        """Grow by half (at least one) while saturated with calls waiting; else keep."""
        if busy >= size and waiting > 0 and size < self.max_size:
            return min(self.max_size, size + max(1, size // 2))
        return size

    def status(self) -> dict:
        return {"runtime": self.runtime, "size": self.size, "busy": self.busy, "min": self.min_size,
                "max": self.max_size, "queue_depth": self.queue_depth, "warm": self.warm,
                "calls_per_second": self._rate.rate()}
