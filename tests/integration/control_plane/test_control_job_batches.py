"""Batched job admission against real Redis and RabbitMQ with a simulated node (no crun):
fair-share order within a batch, two admitters on the same jobs, sandboxes deleted while
queued, batches only part of which fits, and a scheduler that died mid-batch."""

import asyncio
import uuid

import pytest

from corral_common import lifecycle
from corral_common.amqp import EventBus
from corral_common.contracts.events import SandboxPlace
from corral_common.contracts.sandboxes import SandboxSpec, SandboxState
from corral_common.store.jobs import JobStore
from corral_common.store.state import StateStore
from corral_scheduler.jobs.service import MAX_BATCH, JobAdmitter
from corral_scheduler.placement.service import Placer
from corral_scheduler.settings import SchedulerSettings
from tests.polling import until

SPEC = SandboxSpec(environment="e", memory_mb=64, cpu=0.1, timeout_s=60)


class PlaceLog:
    """A node that keeps every sandbox placed on it (nothing ends): who came, in what order,
    and how many places were sent again for one it had."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.resent = 0

    async def on_place(self, event: SandboxPlace) -> None:
        if event.sandbox_id in self.order:
            self.resent += 1
        else:
            self.order.append(event.sandbox_id)


@pytest.fixture
async def plane(redis_url, amqp_url):
    store = StateStore.from_url(redis_url)
    bus = await EventBus(amqp_url).connect()
    settings = SchedulerSettings(redis_url=redis_url, amqp_url=amqp_url, placement_retry_s=0.01)
    node_id = f"nb-{uuid.uuid4().hex[:6]}"
    log = PlaceLog()
    await bus.consume(f"test.batches.{node_id}", [f"node.{node_id}.place"], SandboxPlace, log.on_place, prefetch=64)

    async def node(slots: int) -> str:
        await store.heartbeat(node_id, "http://fake", 64, 1 << 20, slots)
        return node_id

    def admitter() -> JobAdmitter:
        return JobAdmitter(JobStore(store.redis), Placer(store, bus, settings), settings.placement_retry_s)

    yield store, bus, JobStore(store.redis), node, admitter, log
    await bus.close()
    await store.close()


async def submit(jobs: JobStore, job_id: str, count: int, weight: float = 1.0, priority: int = 0) -> list[str]:
    await jobs.create_job(job_id, "t1", SPEC, count, weight=weight, priority=priority)
    return await jobs.enqueue(job_id, "t1", SPEC, 0, count)


async def test_a_batch_is_the_next_admissions_in_fair_share_order_and_commits_nothing(plane):
    store, bus, jobs, *_ = plane
    a = await submit(jobs, "job-a", 20, weight=1)
    b = await submit(jobs, "job-b", 20, weight=3)
    batch = await jobs.peek_many(8)
    assert await jobs.peek_many(8) == batch  # nothing taken
    # Stride: b's passes 1/3, 2/3, 1, 4/3, 5/3, 2 and a's 1, 2 (a tie goes to either job).
    assert sorted(sid for _, sid in batch) == sorted(a[:2] + b[:6])
    assert [sid for job, sid in batch if job == "job-b"] == b[:6]  # each job's oldest first
    assert {job for job, _ in batch[:2]} == {"job-b"}
    # A higher priority is served alone: its last two heads, and no lower-priority work.
    urgent = await submit(jobs, "job-u", 2, priority=5)
    assert await jobs.peek_many(8) == [("job-u", urgent[0]), ("job-u", urgent[1])]
    assert await jobs.done_many([("job-u", urgent[0], True), ("job-u", urgent[1], False),
                                 ("job-u", urgent[1], False)]) == 2  # the repeat is skipped
    record = await jobs.get("job-u")
    assert (record.admitted, record.dropped, record.pending) == (1, 1, 0)
    assert len(await jobs.peek_many(100)) == 40


async def test_batched_admission_keeps_the_weights_and_places_each_once(plane):
    store, bus, jobs, node, admitter, log = plane
    await node(1000)  # room for all: every batch fits whole
    per_job = 200
    for job_id, weight in (("job-a", 1.0), ("job-b", 3.0)):
        await submit(jobs, job_id, per_job, weight=weight)
    one = admitter()
    sizes: list[int] = []
    peek = one.jobs.peek_many

    async def counted(k: int):
        heads = await peek(k)
        sizes.append(len(heads))
        return heads

    one.jobs.peek_many = counted
    run = asyncio.create_task(one.run())
    try:
        await until(lambda: len(log.order) == 2 * per_job, timeout_s=60, what="all placed")
    finally:
        run.cancel()
    assert max(sizes) == MAX_BATCH  # it did batch
    assert len(set(log.order)) == 2 * per_job and log.resent == 0
    # The share is read at a batch boundary while both jobs still have plenty queued: inside
    # a batch the places go out in whatever order their round trips finish, and the batch that
    # empties job-b also holds the job-a picks that follow it in fair order.
    both = 0
    for size in sizes:
        if both + size > 6 * MAX_BATCH:
            break
        both += size
    share_a = sum(s.startswith("job-a") for s in log.order[:both]) / both
    print(f"batches {sizes[:8]}..., admissions while both queued {both}, share a={share_a:.3f}")
    assert 0.25 * 0.8 <= share_a <= 0.25 * 1.2, (share_a, both)
    for job_id in ("job-a", "job-b"):
        record = await jobs.get(job_id)
        assert (record.admitted, record.dropped, record.pending) == (per_job, 0, 0)


async def test_two_admitters_on_the_same_jobs_place_each_sandbox_once(plane):
    store, bus, jobs, node, admitter, log = plane
    node_id = await node(1000)
    ids = [sid for job_id, weight in (("job-a", 1.0), ("job-b", 3.0))
           for sid in await submit(jobs, job_id, 150, weight=weight)]
    runs = [asyncio.create_task(admitter().run()) for _ in range(2)]
    try:
        await until(lambda: len(log.order) == len(ids), timeout_s=60, what="all placed")
        await until(lambda: _drained(jobs), timeout_s=10, what="the queues to empty")
    finally:
        for run in runs:
            run.cancel()
    assert sorted(log.order) == sorted(ids)  # each placed, once
    info = await store.get_node(node_id)
    assert info.used_sandboxes == len(ids)  # one reservation each
    assert await store.node_sandboxes(node_id) == set(ids)
    for job_id in ("job-a", "job-b"):
        record = await jobs.get(job_id)
        assert (record.admitted, record.dropped, record.pending) == (150, 0, 0)  # counted once
    for sid in ids:
        record = await store.get_sandbox(sid)
        assert record.state is SandboxState.scheduled and record.node_id == node_id


async def _drained(jobs: JobStore) -> bool:
    return await jobs.queue_depth() == (0, 0)


async def test_sandboxes_deleted_while_queued_are_dropped_from_the_batch(plane):
    store, bus, jobs, node, admitter, log = plane
    node_id = await node(100)
    ids = await submit(jobs, "job-d", 10)
    # Deleted through the api (record terminated), asked to be deleted (the api's flag, not
    # yet ended), and gone from Redis altogether.
    await store.mark_delete_requested(ids[1])
    await lifecycle.transition(store, bus, ids[1], SandboxState.terminated, reason="deleted")
    await store.mark_delete_requested(ids[4])
    await store.redis.delete(f"sb:{ids[7]}")
    one = admitter()
    assert await one.admit_batch() == 10
    kept = [sid for i, sid in enumerate(ids) if i not in (1, 4, 7)]
    await until(lambda: len(log.order) == len(kept), timeout_s=10, what="the places")
    assert sorted(log.order) == sorted(kept)
    record = await jobs.get("job-d")
    assert (record.admitted, record.dropped, record.pending) == (7, 3, 0)
    for i in (1, 4):
        ended = await store.get_sandbox(ids[i])
        assert (ended.state, ended.reason, ended.node_id) == (SandboxState.terminated, "deleted", None)
    assert await store.get_sandbox(ids[7]) is None
    assert (await store.get_node(node_id)).used_sandboxes == 7  # no room held for the deleted
    assert await one.admit_batch() is None


async def test_a_batch_only_part_of_which_fits_leaves_the_rest_queued_and_shrinks(plane):
    store, bus, jobs, node, admitter, log = plane
    node_id = await node(5)
    ids = await submit(jobs, "job-p", 12)
    one = admitter()
    assert await one.admit_batch() == 5
    assert one.batch == 5
    record = await jobs.get("job-p")
    assert (record.admitted, record.pending) == (5, 7)
    await until(lambda: len(log.order) == 5, timeout_s=10, what="5 places")
    waiting = [sid for sid in ids if sid not in log.order]
    for sid in waiting:
        sb = await store.get_sandbox(sid)
        assert sb.state is SandboxState.pending and sb.reason  # it says why it waits
        assert await store.reservation_node(sid) is None
    # Full: nothing fits, and the head is tried alone from then on (no spray of attempts).
    assert await one.admit_batch() == 0
    assert one.batch == 1
    assert await one.admit_batch() == 0 and one.batch == 1
    # Room for three comes back: the batch grows as it fits again (1, then 2).
    for sid in log.order[:3]:
        await store.release(sid)
    assert await one.admit_batch() == 1 and one.batch == 2
    assert await one.admit_batch() == 2 and one.batch == 4
    assert await one.admit_batch() == 0 and one.batch == 1
    assert (await jobs.get("job-p")).pending == 4
    assert (await store.get_node(node_id)).used_sandboxes == 5
    await until(lambda: len(log.order) == 8, timeout_s=10, what="8 places")
    assert len(set(log.order)) == 8 and log.resent == 0


async def test_a_batch_a_dead_scheduler_left_half_done_is_finished_without_placing_twice(plane):
    """The scheduler died mid-batch: some sandboxes it placed but did not dequeue, one it had
    only reserved room for. A new admitter re-sends the first (the node ignores a place it has),
    places the other with the room it holds, and counts each once."""
    store, bus, jobs, node, admitter, log = plane
    node_id = await node(100)
    ids = await submit(jobs, "job-r", 6)
    for sid in ids[:2]:
        assert await store.reserve(node_id, sid, SPEC, 30) == node_id
        assert await lifecycle.transition(store, bus, sid, SandboxState.scheduled, node_id=node_id)
    assert await store.reserve(node_id, ids[2], SPEC, 30) == node_id
    one = admitter()
    assert await one.admit_batch() == 6
    await until(lambda: len(log.order) == 6, timeout_s=10, what="6 places")
    assert sorted(log.order) == sorted(ids)  # the two placed before were sent again, not placed again
    assert (await store.get_node(node_id)).used_sandboxes == 6
    record = await jobs.get("job-r")
    assert (record.admitted, record.dropped, record.pending) == (6, 0, 0)
    for sid in ids:
        assert (await store.get_sandbox(sid)).state is SandboxState.scheduled
