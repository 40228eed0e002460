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
from typing import Any

import redis.asyncio as aioredis

from corral_api.fncall import metrics
from corral_api.fncall.rpc import FncallRpc, RpcTimeout
from corral_api.fncall.schemas import (
    COMPILED,
    RUNTIMES,
    Batch,
    BatchItem,
    BatchPage,
    BatchStatus,
    FncallApiSettings,
    FncallRequest,
    FncallResponse,
    RuntimeInfo,
    Verdict,
)
from corral_common.errors import BadRequest, NotFound, PayloadTooLarge, ServiceUnavailable
from corral_common.logging import get_logger

log = get_logger(__name__)
COMPILE_TIMEOUT_MS = 10_000
WALL_FACTOR, WALL_EXTRA_MS = 2.0, 500  # the workers' wall-clock limit per case (see executor.py)


def _batch_key(batch_id: str) -> str:
    return f"fncall:batch:{batch_id}"


def safe_relpath(name: str) -> str:
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or name.startswith("/") or ".." in parts or "\0" in name or len(name) > 255:
        raise ValueError(name)
    return "/".join(parts)


class FncallService:
    def __init__(self, rpc: FncallRpc, redis: aioredis.Redis, settings: FncallApiSettings):
        self.rpc = rpc
        self.redis = redis
        self.settings = settings
        self._rates: dict[str, metrics.RateWindow] = defaultdict(metrics.RateWindow)
        self._batches: set[asyncio.Task] = set()

    async def close(self) -> None:
        for task in list(self._batches):
            task.cancel()
        await asyncio.gather(*self._batches, return_exceptions=True)

    # -- validation -----------------------------------------------------------------------------

    def build_job(self, req: FncallRequest, *, loc: list[str | int] | None = None, **extra: Any) -> dict[str, Any]:
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
                rel = safe_relpath(name)
                payload += len(base64.b64decode(content, validate=True))
            except (ValueError, binascii.Error):
                raise BadRequest(f"file {name!r}: the name must be a relative path inside the working dir and the "
                                 "content base64", loc=[*loc, "files", name]) from None
            files[rel] = content
        cases = [c.model_dump() for c in req.tests] if req.tests is not None else [{"stdin": req.stdin or ""}]
        payload += sum(len(c["stdin"]) + len(c.get("expected_stdout") or "") for c in cases)
        if payload > self.settings.max_call_payload_mb * 1024 * 1024:
            raise PayloadTooLarge(f"code + files + stdin + expected output exceed {self.settings.max_call_payload_mb} MB",
                                  loc=loc)
        return {"call_id": uuid.uuid4().hex, "runtime": req.runtime, "code": req.code, "files": files,
                "cases": cases, "time_limit_ms": req.time_limit_ms, "memory_limit_mb": req.memory_limit_mb,
                "output_limit_kb": req.output_limit_kb, "compare": req.compare,
                "compile_timeout_ms": COMPILE_TIMEOUT_MS, "stop_on_failure": req.stop_on_failure, **extra}

    @staticmethod
    def _own_s(job: dict[str, Any]) -> float:
        """The longest a worker may take for this call (compile + every case at its wall limit)."""
        wall_ms = job.get("wall_limit_ms") or job["time_limit_ms"] * WALL_FACTOR + WALL_EXTRA_MS
        return ((job["compile_timeout_ms"] if job["runtime"] in COMPILED else 0) + wall_ms * len(job["cases"])) / 1000

    def timeout_for(self, job: dict[str, Any]) -> float:
        return min(self.settings.max_wait_s, self.settings.queue_wait_s + self._own_s(job))

    def bundle_timeout(self, jobs: list[dict[str, Any]]) -> float:
        """As if the bundle's calls ran one after the other (a node with one free worker)."""
        return min(self.settings.max_wait_s, self.settings.queue_wait_s + sum(self._own_s(j) for j in jobs))

    def bundle_size(self, calls: int) -> int:
        """Calls per AMQP message in a batch: up to ``batch_bundle``, fewer for a small batch so
        that it still spreads over several messages (and nodes)."""
        return max(1, min(self.settings.batch_bundle, calls // 8))

    # -- one call -------------------------------------------------------------------------------

    async def run_job(self, job: dict[str, Any]) -> dict[str, Any]:
        """Publish and await the worker's raw result (a system_error result if none came)."""
        runtime = job["runtime"]
        started = time.monotonic()
        metrics.IN_FLIGHT.labels(runtime=runtime).inc()
        try:
            result = await self.rpc.call(runtime, job, self.timeout_for(job))
        except RpcTimeout as exc:
            result = {"call_id": job["call_id"], "runtime": runtime, "verdict": Verdict.system_error.value,
                      "cases": [], "message": f"{exc} (is a node with fncall workers for {runtime!r} up?)"}
        finally:
            metrics.IN_FLIGHT.labels(runtime=runtime).dec()
        self._record(runtime, result, time.monotonic() - started)
        return result

    async def run_bundle(self, runtime: str, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several calls of one runtime in one message (a batch's); each call's raw result.
        Their ``latency_ms`` is the bundle's."""
        if len(jobs) == 1:
            return [await self.run_job(jobs[0])]
        started = time.monotonic()
        metrics.IN_FLIGHT.labels(runtime=runtime).inc(len(jobs))
        try:
            results = await self.rpc.call_bundle(runtime, jobs, self.bundle_timeout(jobs))
        except RpcTimeout as exc:
            results = [{"call_id": job["call_id"], "runtime": runtime, "verdict": Verdict.system_error.value,
                        "cases": [], "message": f"{exc} (is a node with fncall workers for {runtime!r} up?)"}
                       for job in jobs]
        finally:
            metrics.IN_FLIGHT.labels(runtime=runtime).dec(len(jobs))
        elapsed = time.monotonic() - started
        for result in results:
            self._record(runtime, result, elapsed)
        return results

    def _record(self, runtime: str, result: dict[str, Any], elapsed: float) -> None:
        result["latency_ms"] = round(elapsed * 1000, 3)
        metrics.LATENCY.labels(runtime=runtime).observe(elapsed)
        metrics.CALLS.labels(runtime=runtime, verdict=result.get("verdict", "system_error")).inc()
        self._rates[runtime].add()

    @staticmethod
    def to_response(result: dict[str, Any]) -> FncallResponse:
        return FncallResponse(id=result["call_id"], runtime=result["runtime"], verdict=result["verdict"],
                              compile=result.get("compile"), cases=result.get("cases", []),
                              node_id=result.get("node_id", ""), latency_ms=result.get("latency_ms", 0.0),
                              message=result.get("message", ""))

    async def call(self, req: FncallRequest) -> FncallResponse:
        job = self.build_job(req)
        result = await self.run_job(job)
        if result["verdict"] == Verdict.system_error.value and not result.get("cases") and "no worker" in \
                result.get("message", ""):
            raise ServiceUnavailable(result["message"], code="fncall_unavailable")
        return self.to_response(result)

    async def runtimes(self) -> list[RuntimeInfo]:
        try:
            depths = await self.rpc.queue_depths()
        except Exception:
            depths = {}
        return [RuntimeInfo(name=r, compiled=r in COMPILED, queue_depth=depths.get(r)) for r in RUNTIMES]

    async def refresh_gauges(self) -> None:
        try:
            for runtime, depth in (await self.rpc.queue_depths()).items():
                metrics.QUEUE_DEPTH.labels(runtime=runtime).set(depth)
        except Exception:
            log.warning("fncall.queue_depth_unavailable")
        for runtime in RUNTIMES:
            metrics.CALLS_PER_SECOND.labels(runtime=runtime).set(self._rates[runtime].rate())

    # -- batches --------------------------------------------------------------------------------

    async def create_batch(self, tenant: str, calls: list[FncallRequest]) -> Batch:
        jobs = [self.build_job(req, loc=["body", "calls", i]) for i, req in enumerate(calls)]
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

    async def _run_batch(self, batch_id: str, jobs: list[dict[str, Any]]) -> None:
        key, results_key = _batch_key(batch_id), _batch_key(batch_id) + ":results"
        ttl = self.settings.batch_ttl_s
        size = self.bundle_size(len(jobs))
        by_runtime: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        for index, job in enumerate(jobs):
            by_runtime[job["runtime"]].append((index, job))
        bundles = [(runtime, items[i:i + size]) for runtime, items in by_runtime.items()
                   for i in range(0, len(items), size)]
        sem = asyncio.Semaphore(max(1, self.settings.batch_inflight // size))  # bounds the calls in flight

        async def one(runtime: str, items: list[tuple[int, dict[str, Any]]]) -> None:
            try:
                results = await self.run_bundle(runtime, [job for _, job in items])
            except Exception as exc:  # never lose a slot of the batch
                log.exception("fncall.batch_call_failed", batch_id=batch_id)
                results = [{"call_id": job["call_id"], "runtime": job["runtime"], "verdict": "system_error",
                            "cases": [], "message": f"{type(exc).__name__}: {exc}"} for _, job in items]
            finally:
                sem.release()
            verdicts = Counter(result["verdict"] for result in results)
            async with self.redis.pipeline(transaction=True) as pipe:  # one round trip per bundle
                pipe.rpush(results_key, *(json.dumps({"index": index, "result": self.to_response(result).model_dump(
                    mode="json")}) for (index, _), result in zip(items, results)))
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
