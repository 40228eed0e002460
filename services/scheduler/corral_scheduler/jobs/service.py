"""Admits the queued sandboxes of jobs onto nodes in batches, by weighted fair share.

The queue lives in Redis (``corral_common.store.jobs``), so a restarted scheduler picks up where
the last one stopped. Each round: ask the job store for the next admissions in fair-share
order (stride scheduling within the highest priority, simulated for the whole batch in one
call), try to place them all at once exactly like single requests (``Placer.try_place``:
reserve atomically, mark scheduled, send the place command; their Redis round trips and the
broker's confirms overlap), and dequeue in one call the ones that need no more work. One
that found no room stays queued, and the next batch is only as large as what fitted (see
``next_batch_size``): under contention the admitter tries the job furthest behind first and
alone, as it did one at a time, instead of spraying attempts that cannot fit. When nothing
fits it waits ``placement_retry_s`` and asks again, so capacity freed meanwhile goes to
whichever job is then furthest behind, not to the one that happened to ask first.
"""

import asyncio

from corral_common.logging import get_logger
from corral_common.store.jobs import JobStore
from corral_scheduler import metrics
from corral_scheduler.placement.outcomes import PlaceOutcome
from corral_scheduler.placement.service import Placer

log = get_logger(__name__)

# Admissions attempted at once at most: enough to overlap the round trips and confirms of a
# burst (the node-agents take 32 places at a time each), few enough that a batch that finds
# the nodes full wastes little.
MAX_BATCH = 32


def next_batch_size(size: int, tried: int, placed: int, no_room: int) -> int:
    """The next batch after one of ``tried`` attempts of which ``placed`` took room and
    ``no_room`` found none: everything needed no more work, twice as many (to MAX_BATCH); some
    found no room, only as many as took room (at least one: the head waits alone)."""
    if no_room:
        return max(1, placed)
    if tried < size:  # the queue held fewer: keep the size for the next burst
        return size
    return min(MAX_BATCH, 2 * size)


class JobAdmitter:
    def __init__(self, jobs: JobStore, placer: Placer, retry_s: float):
        self.jobs = jobs
        self.placer = placer
        self.retry_s = retry_s
        self.batch = MAX_BATCH

    async def admit_batch(self) -> int | None:
        """One round: how many queued sandboxes it settled (0: none fitted), None when nothing
        is queued."""
        heads = await self.jobs.peek_many(self.batch)
        if not heads:
            return None
        # Each attempt reads its record first, so the cases one admission at a time had are
        # all here: deleted while queued (dropped), ran and ended meanwhile (ended), placed by
        # a scheduler that died before dequeuing it or by another one on the same head
        # (already_placed: re-sent if still scheduled; reserve() is idempotent per sandbox).
        outcomes = await asyncio.gather(*(self.placer.try_place(sandbox_id) for _, sandbox_id in heads),
                                        return_exceptions=True)
        settled: list[tuple[str, str, bool]] = []
        for (job_id, sandbox_id), outcome in zip(heads, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if isinstance(outcome, asyncio.CancelledError):
                    raise outcome
                log.error("job.admit_failed", sandbox_id=sandbox_id, exc_info=outcome)
            elif outcome:
                settled.append((job_id, sandbox_id, outcome.on_node))
        await self.jobs.done_many(settled)
        placed = sum(o is PlaceOutcome.placed for o in outcomes)
        metrics.JOB_ADMISSIONS.inc(placed)
        self.batch = next_batch_size(self.batch, len(heads), placed, len(heads) - len(settled))
        return len(settled)

    async def run(self) -> None:
        while True:
            try:
                got = await self.admit_batch()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("job.admit_failed")
                got = 0
            if not got:
                await asyncio.sleep(self.retry_s)
