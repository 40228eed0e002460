"""Jobs against real Redis and RabbitMQ with a simulated node (no crun): fair-share admission.

Scaled down from the issue's 2 x 1,000 sandboxes on ~100 slots to 2 x 200 on 20 slots, so
it runs in seconds on 2 cores; the ratio of queue length to capacity is the same (10:1).
"""

import asyncio
import random
import uuid

from corral_common import lifecycle
from corral_common.amqp import EventBus
from corral_common.contracts.events import SandboxPlace
from corral_common.contracts.sandboxes import TERMINAL_STATES, SandboxSpec, SandboxState
from corral_common.store.jobs import JobStore
from corral_common.store.state import StateStore
from corral_scheduler.jobs.service import JobAdmitter
from corral_scheduler.placement.service import Placer
from corral_scheduler.settings import SchedulerSettings
from tests.polling import until

SLOTS = 20
PER_JOB = 200


class FakeNode:
    """Runs each placed sandbox for 20-60 ms, then ends it (as a short sandbox would)."""

    def __init__(self, store: StateStore, bus: EventBus, node_id: str):
        self.store, self.bus, self.node_id = store, bus, node_id
        self.order: list[str] = []
        self.seen: set[str] = set()
        self.resent = 0
        self.running = 0
        self.peak = 0
        self.tasks: set[asyncio.Task] = set()

    async def on_place(self, event: SandboxPlace) -> None:
        # Like the node-agent: a re-sent place (at-least-once) for a sandbox it has is a no-op.
        if event.sandbox_id in self.seen:
            self.resent += 1
            return
        self.seen.add(event.sandbox_id)
        self.order.append(event.sandbox_id)
        task = asyncio.create_task(self._run(event.sandbox_id))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, sandbox_id: str) -> None:
        t = lambda state, **kw: lifecycle.transition(self.store, self.bus, sandbox_id, state,  # noqa: E731
                                                     node_id=self.node_id, **kw)
        await t(SandboxState.starting)
        await t(SandboxState.running)
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(random.uniform(0.02, 0.06))
        self.running -= 1
        await t(SandboxState.stopping, reason="timeout")
        await t(SandboxState.terminated, reason="timeout")

    async def heartbeat(self) -> None:
        while True:
            await self.store.heartbeat(self.node_id, "http://fake", 64, 1 << 20, SLOTS)
            await asyncio.sleep(0.5)


async def test_two_jobs_share_admissions_by_weight_and_all_complete(redis_url, amqp_url):
    store = StateStore.from_url(redis_url)
    jobs = JobStore(store.redis)
    bus = await EventBus(amqp_url).connect()
    node = FakeNode(store, bus, f"fake-{uuid.uuid4().hex[:6]}")
    await bus.consume(f"test.jobs.{node.node_id}", [f"node.{node.node_id}.place"], SandboxPlace, node.on_place,
                      prefetch=64)
    beat = asyncio.create_task(node.heartbeat())
    await store.heartbeat(node.node_id, "http://fake", 64, 1 << 20, SLOTS)
    settings = SchedulerSettings(redis_url=redis_url, amqp_url=amqp_url, placement_retry_s=0.01)
    admitter = JobAdmitter(jobs, Placer(store, bus, settings), settings.placement_retry_s)
    spec = SandboxSpec(environment="e", memory_mb=64, cpu=0.1, timeout_s=60)
    weights = {"job-a": 1.0, "job-b": 3.0}
    for job_id, weight in weights.items():
        await jobs.create_job(job_id, "t1", spec, PER_JOB, weight=weight)
    for job_id in weights:
        for start in range(0, PER_JOB, 64):
            await jobs.enqueue(job_id, "t1", spec, start, min(PER_JOB, start + 64))
    run = asyncio.create_task(admitter.run())
    try:
        # The scheduler dies mid-burst (its task cancelled at whatever await it is in) and a
        # new one takes over from Redis: nothing may be lost or placed twice.
        await until(lambda: len(node.order) >= 100, what="100 admissions", interval_s=0.005)
        run.cancel()
        admitter = JobAdmitter(jobs, Placer(store, bus, settings), settings.placement_retry_s)
        run = asyncio.create_task(admitter.run())
        async def all_ended() -> None:
            while True:
                ids = [sid for j in weights for sid in await jobs.sandbox_ids(j)]
                states = [(await store.get_sandbox(sid)).state for sid in ids]
                if len(ids) == 2 * PER_JOB and all(s in TERMINAL_STATES for s in states):
                    return
                await asyncio.sleep(0.1)

        await asyncio.wait_for(all_ended(), 60)
    finally:
        run.cancel()
        beat.cancel()
    # None lost, none placed twice, all ended normally.
    all_ids = [sid for j in weights for sid in await jobs.sandbox_ids(j)]
    assert sorted(node.order) == sorted(all_ids)
    assert len(set(node.order)) == len(node.order) == 2 * PER_JOB
    for j in weights:
        record = await jobs.get(j)
        assert (record.admitted, record.pending) == (PER_JOB, 0)
        for sid in await jobs.sandbox_ids(j):
            sb = await store.get_sandbox(sid)
            assert (sb.state, sb.reason) == (SandboxState.terminated, "timeout")
    assert node.peak <= SLOTS
    # Share of admissions while both jobs had sandboxes queued: within +-20% of the weights.
    both = []
    for sid in node.order:
        both.append(sid)
        if sum(s.startswith("job-b") for s in both) == PER_JOB:
            break
    share_a = sum(s.startswith("job-a") for s in both) / len(both)
    share_b = 1 - share_a
    print(f"admissions while both active: {len(both)}, share a={share_a:.3f} b={share_b:.3f}, peak {node.peak}, "
          f"places re-sent after the restart {node.resent}")
    assert 0.25 * 0.8 <= share_a <= 0.25 * 1.2, (share_a, len(both))
    assert 0.75 * 0.8 <= share_b <= 0.75 * 1.2, (share_b, len(both))
    await bus.close()
    await store.close()


async def test_a_job_that_waits_for_room_says_why(redis_url, amqp_url):
    """The job's reply carries the scheduler's reason for its next queued sandbox (the CLI shows
    it under the bars, the dashboard beside the queue): which node is short of what."""
    store = StateStore.from_url(redis_url)
    jobs = JobStore(store.redis)
    bus = await EventBus(amqp_url).connect()
    node_id = f"fake-{uuid.uuid4().hex[:6]}"
    placed: list[str] = []

    async def on_place(event: SandboxPlace) -> None:  # runs what it gets, and keeps it running
        if event.sandbox_id not in placed:
            placed.append(event.sandbox_id)
            for state in (SandboxState.starting, SandboxState.running):
                await lifecycle.transition(store, bus, event.sandbox_id, state, node_id=node_id)

    await bus.consume(f"test.jobs.{node_id}", [f"node.{node_id}.place"], SandboxPlace, on_place, prefetch=8)
    await store.heartbeat(node_id, "http://fake", 64, 1 << 20, 1)  # one sandbox slot
    settings = SchedulerSettings(redis_url=redis_url, amqp_url=amqp_url, placement_retry_s=0.01)
    admitter = JobAdmitter(jobs, Placer(store, bus, settings), settings.placement_retry_s)
    spec = SandboxSpec(environment="e", timeout_s=60)
    await jobs.create_job("job-w", "t1", spec, 3)
    await jobs.enqueue("job-w", "t1", spec, 0, 3)
    assert await jobs.waiting_reason("job-w") is None  # not tried yet: nothing to say
    run = asyncio.create_task(admitter.run())
    try:
        reason = await until(lambda: jobs.waiting_reason("job-w"), 20, "the job's waiting reason")
    finally:
        run.cancel()
    assert len(placed) == 1
    assert reason == f"waiting for room: {node_id} full (sandbox slots (1/1))", reason
    # The reason is the head's: once nothing of the job is queued there is none.
    for sid in await jobs.sandbox_ids("job-w"):
        await jobs.done_many([("job-w", sid, False)])
    assert await jobs.waiting_reason("job-w") is None
    await bus.close()
    await store.close()
