"""fncall in the api: validate, publish to the runtime's work queue, await the reply; batches
run in the background with bounded concurrency and keep their results in Redis (a list per
batch in completion order, with a TTL), so any api process can page or stream them."""

import asyncio
import base64
import binascii
import json
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import redis.asyncio as aioredis

from corral_api.fncall import metrics
from corral_api.fncall.rpc import FncallRpc, RpcTimeout
from corral_api.fncall.schemas import (
    Batch,
    BatchItem,
    BatchPage,
    BatchStatus,
    FncallRequest,
    FncallResponse,
    RuntimeInfo,
)
from corral_api.fncall.settings import FncallApiSettings
from corral_api.fncall.warmup import FncallWarmup
from corral_common.contracts.fncall import (
    COMPILED,
    RUNTIMES,
    FncallJob,
    FncallResult,
    JobCase,
    Verdict,
    safe_relpath,
)
from corral_common.logging import get_logger
from corral_common.telemetry import RateWindow
from corral_common.web.errors import BadRequest, NotFound, PayloadTooLarge, ServiceUnavailable

log = get_logger(__name__)
COMPILE_TIMEOUT_MS = 10_000
WORKERS_SEEN_TTL_S = 2.0
# What a call made while the pools warm up is told to wait: a pool starts its workers in seconds
# once the judge tree is mounted.
WARMING_RETRY_AFTER_S = 5
MAX_FILE_PATH = 255  # characters of a file's relative path (the api's limit; the workers take any)


def _batch_key(batch_id: str) -> str:
    return f"fncall:batch:{batch_id}"


class Answer(NamedTuple):
    """A worker's result and how long the api took to get it (queueing included)."""

    result: FncallResult
    latency_ms: float


def _unanswered(job: FncallJob, message: str) -> FncallResult:
    return FncallResult(call_id=job.call_id, runtime=job.runtime, verdict=Verdict.system_error, message=message)


class FncallService:
    def __init__(self, rpc: FncallRpc, redis: aioredis.Redis, settings: FncallApiSettings,
                 warmup: FncallWarmup | None = None):
        self.rpc = rpc
        self.warmup = warmup  # why no worker serves a runtime (the nodes' pools), on the 503 path
        self.redis = redis
        self.settings = settings
        self._rates: dict[str, RateWindow] = defaultdict(RateWindow)
        self._batches: set[asyncio.Task] = set()
        self._served_until: dict[str, float] = {}
        self._asking: dict[str, asyncio.Future[int]] = {}

    async def close(self) -> None:
        for task in list(self._batches):
            task.cancel()
        await asyncio.gather(*self._batches, return_exceptions=True)

    # -- validation -----------------------------------------------------------------------------

    def build_job(self, req: FncallRequest, *, loc: list[str | int] | None = None, **extra: Any) -> FncallJob:
        """The job for a validated request; ``extra`` sets further job fields (SandboxFusion's)."""
        loc = loc or ["body"]
        if req.runtime not in RUNTIMES:
            raise BadRequest(f"unknown runtime {req.runtime!r}; available: {', '.join(RUNTIMES)}",
                             loc=[*loc, "runtime"], code="unknown_runtime")
        if req.stdin is not None and req.tests is not None:
            raise BadRequest("give stdin or tests, not both (each case has its own stdin)", loc=[*loc, "stdin"])
        payload = len(req.code)
        files = {}
        for name, content in req.files.items():
            try:
                if len(name) > MAX_FILE_PATH:
                    raise ValueError(name)
                rel = safe_relpath(name)
                payload += len(base64.b64decode(content, validate=True))
            except (ValueError, binascii.Error):
                raise BadRequest(f"file {name!r}: the name must be a relative path inside the working dir and the "
                                 "content base64", loc=[*loc, "files", name]) from None
            files[rel] = content
        if req.tests is not None:
            cases = [JobCase(stdin=c.stdin, expected_stdout=c.expected_stdout) for c in req.tests]
        else:
            cases = [JobCase(stdin=req.stdin or "")]  # a single run: nothing to judge, not even sent
        payload += sum(len(c.stdin) + len(c.expected_stdout or "") for c in cases)
        if payload > self.settings.max_call_payload_mb * 1024 * 1024:
            raise PayloadTooLarge(f"code + files + stdin + expected output exceed {self.settings.max_call_payload_mb} MB",
                                  loc=loc)
        fields = {"call_id": uuid.uuid4().hex, "runtime": req.runtime, "code": req.code, "files": files,
                  "cases": cases, "time_limit_ms": req.time_limit_ms, "memory_limit_mb": req.memory_limit_mb,
                  "output_limit_kb": req.output_limit_kb, "compare": req.compare,
                  "compile_timeout_ms": COMPILE_TIMEOUT_MS, "stop_on_failure": req.stop_on_failure, **extra}
        return FncallJob(**fields)

    async def require_workers(self, runtime: str, loc: list[str | int]) -> None:
        """503 at once when no node consumes ``runtime``'s queue: a call would only wait out
        its queueing time there. A runtime seen served is not asked about again for a moment."""
        if self._served_until.get(runtime, 0.0) > time.monotonic():
            return
        asking = self._asking.get(runtime)
        if asking is None:  # a burst asks the broker once
            asking = self._asking[runtime] = asyncio.ensure_future(self.rpc.consumers(runtime))
            asking.add_done_callback(lambda _: self._asking.pop(runtime, None))
        if await asyncio.shield(asking) == 0:
            warming, said = await self.warmup.why_unserved(runtime) if self.warmup is not None else (False, "")
            if warming:
                raise ServiceUnavailable(f"runtime {runtime!r} is warming up: no worker serves it yet ({said}); "
                                         f"try again in {WARMING_RETRY_AFTER_S} s", loc=loc,
                                         code="fncall_warming_up", retry_after_s=WARMING_RETRY_AFTER_S)
            raise ServiceUnavailable(f"no fncall worker serves runtime {runtime!r} now "
                                     f"({said or 'no node runs its pool'})", loc=loc, code="fncall_unavailable")
        self._served_until[runtime] = time.monotonic() + WORKERS_SEEN_TTL_S

    def timeout_for(self, job: FncallJob) -> float:
        return min(self.settings.max_wait_s, self.settings.queue_wait_s + job.longest_run_s())

    def bundle_timeout(self, jobs: list[FncallJob]) -> float:
        """As if the bundle's calls ran one after the other (a node with one free worker)."""
        return min(self.settings.max_wait_s, self.settings.queue_wait_s + sum(j.longest_run_s() for j in jobs))

    def bundle_size(self, calls: int) -> int:
        """Calls per AMQP message in a batch: up to ``batch_bundle``, fewer for a small batch so
        that it still spreads over several messages (and nodes)."""
        return max(1, min(self.settings.batch_bundle, calls // 8))

    # -- one call -------------------------------------------------------------------------------

    async def run_job(self, job: FncallJob, timeout_s: float | None = None) -> Answer:
        """Publish and await the worker's result (a system_error result if none came within
        ``timeout_s``, default ``timeout_for(job)``)."""
        runtime = job.runtime
        started = time.monotonic()
        metrics.IN_FLIGHT.labels(runtime=runtime).inc()
        try:
            result = await self.rpc.call(runtime, job, timeout_s or self.timeout_for(job))
        except RpcTimeout as exc:
            result = _unanswered(job, f"{exc} (is a node with fncall workers for {runtime!r} up?)")
        finally:
            metrics.IN_FLIGHT.labels(runtime=runtime).dec()
        return self._record(runtime, result, time.monotonic() - started)

    async def run_bundle(self, runtime: str, jobs: list[FncallJob]) -> list[Answer]:
        """Several calls of one runtime in one message (a batch's); each call's result.
        Their latency is the bundle's."""
        if len(jobs) == 1:
            return [await self.run_job(jobs[0])]
        started = time.monotonic()
        metrics.IN_FLIGHT.labels(runtime=runtime).inc(len(jobs))
        try:
            results = await self.rpc.call_bundle(runtime, jobs, self.bundle_timeout(jobs))
        except RpcTimeout as exc:
            results = [_unanswered(job, f"{exc} (is a node with fncall workers for {runtime!r} up?)") for job in jobs]
        finally:
            metrics.IN_FLIGHT.labels(runtime=runtime).dec(len(jobs))
        elapsed = time.monotonic() - started
        return [self._record(runtime, result, elapsed) for result in results]

    def _record(self, runtime: str, result: FncallResult, elapsed: float) -> Answer:
        metrics.LATENCY.labels(runtime=runtime).observe(elapsed)
        metrics.CALLS.labels(runtime=runtime, verdict=result.verdict.value).inc()
        self._rates[runtime].add()
        return Answer(result, round(elapsed * 1000, 3))

    @staticmethod
    def to_response(answer: Answer) -> FncallResponse:
        result = answer.result
        return FncallResponse(id=result.call_id, runtime=result.runtime, verdict=result.verdict,
                              compile=result.compile, cases=result.cases, node_id=result.node_id,
                              latency_ms=answer.latency_ms, message=result.message)

    async def run_call(self, job: FncallJob, loc: list[str | int], timeout_s: float | None = None) -> Answer:
        """One call of a request (``loc`` names its runtime field): 503 when nobody serves it."""
        await self.require_workers(job.runtime, loc)
        return await self.run_job(job, timeout_s)

    async def call(self, req: FncallRequest) -> FncallResponse:
        job = self.build_job(req)
        answer = await self.run_call(job, ["body", "runtime"])
        result = answer.result
        if result.verdict == Verdict.system_error and not result.cases and "no worker" in result.message:
            raise ServiceUnavailable(result.message, code="fncall_unavailable")
        return self.to_response(answer)

    async def runtimes(self) -> list[RuntimeInfo]:
        try:
            depths = await self.rpc.queue_depths()
        except Exception:  # noqa: BLE001 - queue depths are best effort: a listing never fails on them
            depths = {}
        return [RuntimeInfo(name=r, compiled=r in COMPILED, queue_depth=depths.get(r)) for r in RUNTIMES]

    def calls_per_second(self, runtime: str) -> float:
        """Calls this api process answered per second lately (the gauge's number)."""
        return self._rates[runtime].rate()

    async def refresh_gauges(self) -> None:
        try:
            for runtime, depth in (await self.rpc.queue_depths()).items():
                metrics.QUEUE_DEPTH.labels(runtime=runtime).set(depth)
        except Exception:  # noqa: BLE001 - a gauge refresh must not kill the refresher
            log.warning("fncall.queue_depth_unavailable")
        for runtime in RUNTIMES:
            metrics.CALLS_PER_SECOND.labels(runtime=runtime).set(self.calls_per_second(runtime))

    # -- batches --------------------------------------------------------------------------------

    async def create_batch(self, tenant: str, calls: list[FncallRequest]) -> Batch:
        jobs = [self.build_job(req, loc=["body", "calls", i]) for i, req in enumerate(calls)]
        first_of: dict[str, int] = {}
        for i, job in enumerate(jobs):
            first_of.setdefault(job.runtime, i)
        for runtime, first in first_of.items():
            await self.require_workers(runtime, ["body", "calls", first, "runtime"])
        batch_id = uuid.uuid4().hex
        key = _batch_key(batch_id)
        ttl = self.settings.batch_ttl_s
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"tenant": tenant, "total": len(jobs), "completed": 0,
                                    "status": BatchStatus.running.value, "created": time.time()})
            pipe.expire(key, ttl)
            await pipe.execute()
        task = asyncio.create_task(self._run_batch(batch_id, jobs))
        self._batches.add(task)
        task.add_done_callback(self._batches.discard)
        metrics.BATCHES.inc()
        return Batch(id=batch_id, status=BatchStatus.running, total=len(jobs), completed=0)

    async def _run_batch(self, batch_id: str, jobs: list[FncallJob]) -> None:
        key, results_key = _batch_key(batch_id), _batch_key(batch_id) + ":results"
        ttl = self.settings.batch_ttl_s
        size = self.bundle_size(len(jobs))
        by_runtime: dict[str, list[tuple[int, FncallJob]]] = defaultdict(list)
        for index, job in enumerate(jobs):
            by_runtime[job.runtime].append((index, job))
        bundles = [(runtime, items[i:i + size]) for runtime, items in by_runtime.items()
                   for i in range(0, len(items), size)]
        sem = asyncio.Semaphore(max(1, self.settings.batch_inflight // size))  # bounds the calls in flight

        async def one(runtime: str, items: list[tuple[int, FncallJob]]) -> None:
            try:
                answers = await self.run_bundle(runtime, [job for _, job in items])
            except Exception as exc:  # never lose a slot of the batch
                log.exception("fncall.batch_call_failed", batch_id=batch_id)
                answers = [Answer(_unanswered(job, f"{type(exc).__name__}: {exc}"), 0.0) for _, job in items]
            finally:
                sem.release()
            verdicts = Counter(answer.result.verdict.value for answer in answers)
            async with self.redis.pipeline(transaction=True) as pipe:  # one round trip per bundle
                pipe.rpush(results_key, *(json.dumps({"index": index, "result": self.to_response(answer).model_dump(
                    mode="json")}) for (index, _), answer in zip(items, answers)))
                pipe.expire(results_key, ttl)
                pipe.hincrby(key, "completed", len(items))
                for verdict, count in verdicts.items():
                    pipe.hincrby(key, f"verdict:{verdict}", count)
                await pipe.execute()

        tasks = []
        for runtime, items in bundles:
            await sem.acquire()
            tasks.append(asyncio.create_task(one(runtime, items)))
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.redis.hset(key, "status", BatchStatus.done.value)

    async def _batch_meta(self, tenant: str, batch_id: str) -> Batch:
        data = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
                for k, v in (await self.redis.hgetall(_batch_key(batch_id))).items()}
        if not data or data.get("tenant") != tenant:
            raise NotFound(f"batch {batch_id} not found (or expired)", loc=["path", "batch_id"])
        verdicts = {k.removeprefix("verdict:"): int(v) for k, v in data.items() if k.startswith("verdict:")}
        return Batch(id=batch_id, status=data["status"], total=int(data["total"]), completed=int(data["completed"]),
                     verdicts=verdicts)

    async def get_batch(self, tenant: str, batch_id: str, *, offset: int, limit: int, wait: bool,
                        timeout: float) -> BatchPage:
        meta = await self._batch_meta(tenant, batch_id)
        deadline = time.monotonic() + timeout
        while wait and meta.status != BatchStatus.done and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            meta = await self._batch_meta(tenant, batch_id)
        raw = await self.redis.lrange(_batch_key(batch_id) + ":results", offset, offset + limit - 1) if limit else []
        items = [BatchItem.model_validate_json(r) for r in raw]
        return BatchPage(**meta.model_dump(), offset=offset, next_offset=offset + len(items), results=items)

    async def stream_batch(self, tenant: str, batch_id: str, offset: int = 0) -> AsyncIterator[bytes]:
        """NDJSON: every result from ``offset`` on as it completes, then a final summary line."""
        await self._batch_meta(tenant, batch_id)
        results_key = _batch_key(batch_id) + ":results"
        while True:
            meta = await self._batch_meta(tenant, batch_id)
            raw = await self.redis.lrange(results_key, offset, offset + 999)
            for r in raw:
                yield r + b"\n" if isinstance(r, bytes) else (r + "\n").encode()
            offset += len(raw)
            if meta.status == BatchStatus.done and offset >= meta.completed:
                yield (json.dumps({"batch": meta.model_dump(mode="json")}) + "\n").encode()
                return
            if not raw:
                await asyncio.sleep(0.05)
