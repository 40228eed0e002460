"""Admits the queued sandboxes of jobs onto nodes, one at a time, by weighted fair share.

The queue lives in Redis (``corral_common.jobs``), so a restarted scheduler picks up where
the last one stopped. Each round: ask the job store which job is furthest behind its share
(stride scheduling within the highest priority) and its oldest pending sandbox, try to place
it exactly like a single request (``Placer.try_place``: reserve atomically, mark scheduled,
send the place command), and dequeue it once placed. When it finds no room the admitter
waits ``placement_retry_s`` and asks again, so capacity freed meanwhile goes to whichever
job is then furthest behind, not to the one that happened to ask first.
"""

import asyncio

from corral_common.events import SandboxRequested
from corral_common.jobs import JobStore
from corral_common.logging import get_logger
from corral_common.sandboxes import TERMINAL_STATES, SandboxState
from corral_scheduler import metrics
from corral_scheduler.placement.service import Placer

log = get_logger(__name__)


class JobAdmitter:
    def __init__(self, jobs: JobStore, placer: Placer, retry_s: float):
        self.jobs = jobs
        self.placer = placer
        self.retry_s = retry_s
        self.admitted = 0

    async def admit_one(self) -> bool | None:
        """One admission attempt: True placed, False no room, None nothing queued."""
        head = await self.jobs.peek()
        if head is None:
            return None
        job_id, sandbox_id = head
        record = await self.placer.store.get_sandbox(sandbox_id)
        if record is None or record.state in TERMINAL_STATES:
            # Deleted while queued; or it ran and ended meanwhile (a job queued again after
            # Redis lost it, whose node registered it again): that one was placed.
            await self.jobs.done(job_id, sandbox_id, placed=record is not None and record.node_id is not None)
            return True
        if record.state is not SandboxState.pending:
            # Placed by a scheduler that died before dequeuing it: re-send and dequeue.
            await self.placer.try_place(SandboxRequested(sandbox_id=sandbox_id, tenant=record.tenant,
                                                         spec=record.spec))
            await self.jobs.done(job_id, sandbox_id, placed=True)
            return True
        event = SandboxRequested(sandbox_id=sandbox_id, tenant=record.tenant, spec=record.spec)
        if not await self.placer.try_place(event):
            return False
        record = await self.placer.store.get_sandbox(sandbox_id)
        placed = record is not None and record.state is not SandboxState.pending and record.node_id is not None \
            and record.state is not SandboxState.failed
        await self.jobs.done(job_id, sandbox_id, placed=placed)
        self.admitted += 1
        if placed:
            metrics.JOB_ADMISSIONS.inc()
        return True

    async def run(self) -> None:
        while True:
            try:
                got = await self.admit_one()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("job.admit_failed")
                got = False
            if got is not True:
                await asyncio.sleep(self.retry_s)
