"""Jobs: one call asks for up to 32,000 sandboxes; they queue in Redis and the scheduler
admits them by fair share (``corral_common.store.jobs``, ``corral_scheduler.jobs``).

POST answers at once: the records are created and queued in chunks by a background task
(pipelined). A job whose submission an api crash interrupted is finished by the next api
process (``jobs:submitting``); ids are deterministic, so nothing is created twice.

Redis keeps the queues (its append-only file survives a restart); the job as asked for is
also a SQL row. When Redis lost its data (the marker ``jobs:durable`` is gone), every job
not deleted whose Redis record is gone is queued again from its row, after a grace period
in which the node-agents register the sandboxes they run: those are found running, the
ones that ended (in the SQL history) are not queued again, the rest are queued anew.
"""

import asyncio
import secrets
import time

from corral_api import metrics
from corral_api.jobs.models import JobRow
from corral_api.jobs.repository import JobRepository
from corral_api.jobs.schemas import Job, JobCreate
from corral_api.quotas.service import TenantQuotas
from corral_api.sandboxes.service import SandboxService
from corral_common.contracts.sandboxes import TERMINAL_STATES, SandboxSpec, check_labels
from corral_common.logging import get_logger
from corral_common.store.jobs import JobRecord, JobStore
from corral_common.web.errors import NotFound, Unprocessable
from corral_common.web.overload import is_unavailable

log = get_logger(__name__)

CHUNK = 500


class JobService:
    def __init__(self, jobs: JobStore, sandboxes: SandboxService, rows: JobRepository | None = None,
                 quotas: TenantQuotas | None = None):
        self.jobs = jobs
        # A job is admitted whole against its tenant's quotas (quotas/ledger.py says why).
        self.quotas = quotas
        self.sandboxes = sandboxes
        self.rows = rows  # None: jobs live in Redis only (not queued again after a wipe)
        self._tasks: set[asyncio.Task] = set()

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def create(self, tenant: str, body: JobCreate) -> JobRecord:
        spec = SandboxSpec.model_validate(body.spec.model_dump())
        if spec.from_snapshot:
            # A snapshot restores on its one node, one sandbox at a time: not a job's business.
            raise Unprocessable("jobs cannot restore snapshots; create the sandboxes one by one",
                                loc=["body", "spec", "from_snapshot"], code="unsupported_in_jobs")
        if self.sandboxes.ceilings is not None:
            await self.sandboxes.ceilings.require(spec, loc=("body", "spec"))
        if self.sandboxes.network is not None:
            await self.sandboxes.network.require(spec.network, loc=("body", "spec", "network"), backend=spec.backend,
                                                 guest_kit=not spec.disk_image)
        # Resolved once for the whole job: every sandbox of it carries this pin.
        spec, image = await self.sandboxes.environments.require_spec(spec, loc=("body", "spec"), tenant=tenant)
        job_id = f"job-{secrets.token_hex(6)}"
        labels = {**spec.labels, **body.labels, "job": job_id}
        try:  # each label set passed alone; together (plus job=<id>) they must still make a valid spec
            check_labels(labels)
        except ValueError as exc:
            raise Unprocessable(f"the spec's labels with the job's: {exc}", loc=["body", "labels"],
                                code="invalid_labels") from None
        spec = spec.model_copy(update={"labels": labels})
        created_at = time.time()
        if self.quotas is not None:  # 429 quota_exceeded, and nothing made
            await self.quotas.admit_job(tenant, job_id, body.count, spec)
        try:
            if self.rows is not None:  # durable first: a job Redis has is one SQL can queue again
                await asyncio.to_thread(self.rows.add, JobRow(
                    id=job_id, tenant=tenant, count=body.count, weight=body.weight, priority=body.priority,
                    spec=spec.model_dump(mode="json"), labels=body.labels, created_at=created_at))
            await self.jobs.create_job(job_id, tenant, spec, body.count, weight=body.weight,
                                       priority=body.priority, labels=body.labels, created_at=created_at,
                                       image=image)
        except BaseException:
            if self.quotas is not None:
                await self.quotas.drop(tenant, job_id)
            raise
        await self.jobs.mark_submitting(job_id)
        self._spawn(self._submit(job_id))
        metrics.SANDBOXES_REQUESTED.labels(backend=spec.backend, via="job").inc(body.count)
        record = await self.jobs.get(job_id)
        assert record is not None
        return record

    async def resume_submissions(self) -> None:
        """At api start: finish the submissions a previous api process did not."""
        for job_id in await self.jobs.submitting():
            self._spawn(self._submit(job_id))

    async def _submit(self, job_id: str) -> None:
        try:
            ended: frozenset[str] = frozenset()
            if await self.jobs.is_requeued(job_id):  # its sandboxes that ended are not run again
                ended = frozenset(await asyncio.to_thread(self.sandboxes.history.states_with_prefix, f"{job_id}-"))
            while True:
                job = await self.jobs.get(job_id)
                if job is None or job.deleted or job.submitted >= job.count:
                    break
                stop = min(job.count, job.submitted + CHUNK)
                await self.jobs.enqueue(job_id, job.tenant, job.spec, job.submitted, stop, skip=ended,
                                        image=job.image)
            await self.jobs.done_submitting(job_id)
        except Exception:
            log.exception("job.submit_failed", job_id=job_id)  # the next api start resumes it

    async def _get(self, tenant: str, job_id: str) -> JobRecord:
        record = await self.jobs.get(job_id)
        if record is None or record.tenant != tenant:
            raise NotFound(f"job {job_id} not found", loc=["path", "job_id"])
        return record

    async def get(self, tenant: str, job_id: str) -> Job:
        record = await self._get(tenant, job_id)
        ids = await self.jobs.sandbox_ids(job_id)
        counts: dict[str, int] = {}
        forgotten = []  # gone from Redis (expired, or lost with its data): the SQL history has the ended
        for start in range(0, len(ids), 2000):
            chunk = ids[start:start + 2000]
            for sid, state in zip(chunk, await self.jobs.sandbox_states(chunk), strict=True):
                if state is None:
                    forgotten.append(sid)
                else:
                    counts[state] = counts.get(state, 0) + 1
        if forgotten:
            ended = await asyncio.to_thread(self.sandboxes.history.states_with_prefix, f"{job_id}-")
            for sid in forgotten:
                key = ended.get(sid, "expired")
                counts[key] = counts.get(key, 0) + 1
        return Job(id=record.id, count=record.count, weight=record.weight, priority=record.priority,
                   labels=record.labels, created_at=record.created_at, deleted=record.deleted,
                   submitted=record.submitted, admitted=record.admitted, pending=record.pending,
                   queue_position=await self._position(record), counts=counts,
                   waiting_reason=await self.jobs.waiting_reason(job_id) if record.pending else None)

    async def of_tenant(self, tenant: str, *, include_deleted: bool = False) -> list[Job]:
        """The tenant's jobs, newest first (counts per state as ``get``)."""
        jobs = []
        for job_id in await self.jobs.tenant_job_ids(tenant):
            record = await self.jobs.get(job_id)
            if record is not None and record.tenant == tenant and (include_deleted or not record.deleted):
                jobs.append(await self.get(tenant, job_id))
        return sorted(jobs, key=lambda job: job.created_at, reverse=True)

    async def _position(self, record: JobRecord) -> int | None:
        """Where this job stands in the scheduler's next pick (priority, then stride pass)."""
        if record.pending == 0:
            return None
        keys = []
        for job_id in await self.jobs.active_job_ids():
            other = await self.jobs.get(job_id)
            if other is None or other.pending == 0:
                continue
            keys.append(((-other.priority, other.vstart + (other.admitted + 1) / other.weight), job_id))
        keys.sort()
        ranked = [job_id for _, job_id in keys]
        return ranked.index(record.id) if record.id in ranked else None

    async def delete(self, tenant: str, job_id: str) -> Job:
        record = await self._get(tenant, job_id)
        if self.rows is not None:
            await asyncio.to_thread(self.rows.mark_deleted, job_id)
        await self.jobs.mark_deleted(job_id)
        self._spawn(self._terminate_all(tenant, job_id))
        return await self.get(tenant, record.id)

    async def _terminate_all(self, tenant: str, job_id: str) -> None:
        done: set[str] = set()
        while True:
            # A submission chunk in flight when the job was marked deleted may add records.
            ids = [sid for sid in await self.jobs.sandbox_ids(job_id) if sid not in done]
            if not ids and not await self.jobs.is_submitting(job_id):
                if self.quotas is not None:  # the sandboxes never made give their share back too
                    await self.quotas.drop(tenant, job_id)
                return
            failed = await self._terminate(tenant, job_id, ids)
            done.update(set(ids) - failed)  # the failed ones (the broker away...) are tried again
            await asyncio.sleep(0.2)

    async def _terminate(self, tenant: str, job_id: str, ids: list[str]) -> set[str]:
        sem = asyncio.Semaphore(64)
        failed: set[str] = set()

        async def one(sid: str) -> None:
            async with sem:
                try:
                    record = await self.sandboxes.store.get_sandbox(sid)
                    if record is not None and record.state not in TERMINAL_STATES:
                        await self.sandboxes.delete(tenant, sid)
                except Exception as exc:
                    log.exception("job.delete_sandbox_failed", job_id=job_id, sandbox_id=sid)
                    if is_unavailable(exc):
                        failed.add(sid)

        await asyncio.gather(*(one(sid) for sid in ids))
        return failed

    # ---- Redis lost its data: queue the jobs again from SQL --------------------------------

    async def requeue_forever(self, interval_s: float, grace_s: float) -> None:
        while True:
            try:
                await self.requeue_lost(grace_s)
            except Exception:
                log.exception("job.requeue_failed")
            await asyncio.sleep(interval_s)

    async def requeue_lost(self, grace_s: float) -> list[str]:
        """When Redis lost its data, queue again every job it lost; returns those."""
        if self.rows is None or await self.jobs.is_durable():
            return []
        if not await asyncio.to_thread(self.rows.live):
            await self.jobs.mark_durable()
            return []
        # Let every live node register what it runs first (each does before its next heartbeat):
        # a sandbox found running is not started twice.
        await asyncio.sleep(grace_s)
        requeued = []
        for row in await asyncio.to_thread(self.rows.live):
            if await self.jobs.exists(row.id):
                continue
            await self._requeue(row)
            requeued.append(row.id)
        await self.jobs.mark_durable()
        if requeued:
            log.warning("job.requeued_after_redis_loss", jobs=len(requeued))
        return requeued

    async def _requeue(self, row: JobRow) -> None:
        spec = SandboxSpec.model_validate(row.spec)
        # Not pinned: the SQL row keeps the spec only, so these sandboxes' nodes resolve the
        # environment (catalog compatibility branch) until the row records the pin too.
        # compat(d03aa3f, 2026-12-07): goes when JobRow keeps the pin.
        await self.jobs.create_job(row.id, row.tenant, spec, row.count, weight=row.weight, priority=row.priority,
                                   labels=row.labels, created_at=row.created_at)
        ended = await asyncio.to_thread(self.sandboxes.history.states_with_prefix, f"{row.id}-")
        if self.quotas is not None:  # the rest counts against its tenant's quotas again
            await self.quotas.readmit_job(row.tenant, row.id, max(0, row.count - len(ended)), spec)
            # One that ended since it was listed gave its share back to its own entry, if any:
            # give it back from the job's (once per sandbox, as its end event would).
            before, ended = ended, await asyncio.to_thread(self.sandboxes.history.states_with_prefix, f"{row.id}-")
            for sandbox_id in set(ended) - set(before):
                await self.quotas.ledger.release(row.tenant, row.id, sandbox_id)
        # Those that ended count as admitted once (they were), so the job's totals add up; the
        # submission skips them (it lists them again, later: a superset of these).
        await self.jobs.mark_requeued(row.id, len(ended))
        await self.jobs.mark_submitting(row.id)
        self._spawn(self._submit(row.id))
