"""Jobs: many sandboxes of one spec, queued durably in Redis and admitted by fair share.

Keys:
    job:<id>            hash: tenant, count, weight, priority, spec, image (its environment as
                        the api resolved it, written on every record), labels, created_at,
                        submitted (records created so far), admitted (placed on a node)
    job:<id>:pending    zset: sandbox ids not admitted yet, scored by submission order
    jobs:active         set: jobs with pending sandboxes

The scheduler admits sandboxes in batches: ``peek_many(k)`` names the next k admissions
(highest priority first, then the lowest admitted/weight: stride scheduling, so concurrent jobs
get admissions in proportion to their weights, within a batch as across batches) and their
sandboxes, oldest first per job, without removing them; once a sandbox is placed (or found
ended) ``done_many`` removes it and counts it. A scheduler that dies in between peeks the same
sandboxes again, and placement is idempotent (the reservation ``resv:<id>`` survives), so
nothing is lost or placed twice.
"""

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis

from corral_common.contracts.images import ResolvedImage
from corral_common.contracts.sandboxes import SandboxSpec
from corral_common.store.redis_client import connect

MAX_JOB_SANDBOXES = 32000

# Present while Redis holds what it held: set once the jobs of a Redis that lost it are queued
# again (the api's JobService.requeue_lost).
_DURABLE = "jobs:durable"
# Jobs whose records an api is still creating (a later api process finishes them).
_SUBMITTING = "jobs:submitting"

# As in state.py: the client decodes replies, redis-py's types do not know it.
RedisMapping = Mapping[Any, Any]

# The next ARGV[1] admissions in fair-share order, as if each were made (nothing is committed):
# stride scheduling within the highest priority, each pick advancing its job's pass, and only
# that priority (a batch never mixes in lower-priority work that could race it for room).
# KEYS: jobs:active. Returns {job_id, sandbox_id, job_id, sandbox_id, ...} (empty: nothing queued).
_PEEK_MANY = """
local jobs = {}
for _, job in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local f = redis.call('HMGET', 'job:' .. job, 'weight', 'priority', 'admitted', 'vstart')
  local pending = f[1] and redis.call('ZCARD', 'job:' .. job .. ':pending') or 0
  if pending == 0 then
    -- gone, all admitted, or not submitted yet (the submitter re-adds it)
    redis.call('SREM', KEYS[1], job)
  else
    jobs[#jobs + 1] = {id = job, weight = tonumber(f[1]), prio = tonumber(f[2] or '0'),
                       admitted = tonumber(f[3] or '0'), vstart = tonumber(f[4] or '0'), pending = pending, taken = 0}
  end
end
local k, out, top = tonumber(ARGV[1]), {}, nil
while #out < 2 * k do
  local best, best_pass = nil, nil
  for _, j in ipairs(jobs) do
    if j.taken < j.pending then
      local pass = j.vstart + (j.admitted + j.taken + 1) / j.weight
      if best == nil or j.prio > best.prio or (j.prio == best.prio and pass < best_pass) then
        best, best_pass = j, pass
      end
    end
  end
  if best == nil or (top ~= nil and best.prio < top) then break end
  top = best.prio
  if best.heads == nil then best.heads = redis.call('ZRANGE', 'job:' .. best.id .. ':pending', 0, k - 1) end
  best.taken = best.taken + 1
  out[#out + 1] = best.id
  out[#out + 1] = best.heads[best.taken]
end
return out
"""

# Dequeue admitted (placed 1) or ended (placed 0) sandboxes; one already dequeued is skipped.
# KEYS: jobs:active; ARGV: job_id, sandbox_id, placed, job_id, ... Returns how many it dequeued.
_DONE_MANY = """
local n = 0
for i = 1, #ARGV, 3 do
  local job, pending = 'job:' .. ARGV[i], 'job:' .. ARGV[i] .. ':pending'
  if redis.call('ZREM', pending, ARGV[i + 1]) == 1 then
    n = n + 1
    redis.call('HINCRBY', job, ARGV[i + 2] == '1' and 'admitted' or 'dropped', 1)
    if redis.call('ZCARD', pending) == 0 then redis.call('SREM', KEYS[1], ARGV[i]) end
  end
end
return n
"""


@dataclass
class JobRecord:
    id: str
    tenant: str
    count: int
    weight: float
    priority: int
    spec: SandboxSpec
    labels: dict[str, str]
    created_at: float
    submitted: int
    admitted: int
    dropped: int
    pending: int
    deleted: bool
    vstart: float = 0.0
    image: ResolvedImage | None = None

    @classmethod
    def from_hash(cls, data: dict[str, str], pending: int) -> "JobRecord":
        return cls(id=data["id"], tenant=data["tenant"], count=int(data["count"]), weight=float(data["weight"]),
                   priority=int(data.get("priority") or 0), spec=SandboxSpec.model_validate_json(data["spec"]),
                   labels=json.loads(data.get("labels") or "{}"), created_at=float(data["created_at"]),
                   submitted=int(data.get("submitted") or 0), admitted=int(data.get("admitted") or 0),
                   dropped=int(data.get("dropped") or 0), pending=pending, deleted=data.get("deleted") == "1",
                   vstart=float(data.get("vstart") or 0),
                   image=ResolvedImage.model_validate_json(data["image"]) if data.get("image") else None)


def sandbox_id_for(job_id: str, index: int) -> str:
    """Deterministic ids: a submitter that restarts re-creates the same sandboxes, not new ones."""
    return f"{job_id}-{index:05d}"


class JobStore:
    def __init__(self, redis: aioredis.Redis):
        self.redis = redis
        self._peek_many = redis.register_script(_PEEK_MANY)
        self._done_many = redis.register_script(_DONE_MANY)

    @classmethod
    def from_url(cls, url: str) -> "JobStore":
        return cls(connect(url))

    async def close(self) -> None:
        await self.redis.aclose()

    async def create_job(self, job_id: str, tenant: str, spec: SandboxSpec, count: int, *, weight: float = 1.0,
                         priority: int = 0, labels: dict[str, str] | None = None,
                         created_at: float | None = None, image: ResolvedImage | None = None) -> None:
        if not 1 <= count <= MAX_JOB_SANDBOXES:
            raise ValueError(f"count must be 1..{MAX_JOB_SANDBOXES}")
        # A job joins at the current virtual time (the least pass among active jobs), so it
        # shares from now on instead of catching up on admissions made before it existed.
        vstart = await self._virtual_time()
        mapping = {"vstart": repr(vstart), "id": job_id, "tenant": tenant, "count": count, "weight": repr(float(weight)),
                   "priority": priority, "spec": spec.model_dump_json(), "labels": json.dumps(labels or {}),
                   "created_at": repr(time.time() if created_at is None else created_at), "submitted": 0, "admitted": 0, "dropped": 0}
        if image is not None:
            mapping["image"] = image.model_dump_json()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(f"job:{job_id}", mapping=cast(RedisMapping, mapping))
            pipe.sadd(f"jobs:tenant:{tenant}", job_id)
            await pipe.execute()

    async def _virtual_time(self) -> float:
        passes = []
        for job in cast(set[str], await self.redis.smembers("jobs:active")):
            weight, admitted, vstart = await self.redis.hmget(f"job:{job}", "weight", "admitted", "vstart")
            if weight:
                passes.append(float(vstart or 0) + int(admitted or 0) / float(weight))
        return min(passes, default=0.0)

    async def enqueue(self, job_id: str, tenant: str, spec: SandboxSpec, start: int, stop: int,
                      skip: frozenset[str] = frozenset(), image: ResolvedImage | None = None) -> list[str]:
        """Create the records of sandboxes [start, stop) and queue them, in one pipeline.
        Those in ``skip`` (ended already: a job queued again after Redis lost it) are only
        counted as the job's. ``image``: the job's pin, written on each record."""
        now = repr(time.time())
        fields = {"tenant": tenant, "spec": spec.model_dump_json(), "job_id": job_id}
        if image is not None:
            fields["image"] = image.model_dump_json()
        ids = [sandbox_id_for(job_id, i) for i in range(start, stop)]
        async with self.redis.pipeline(transaction=True) as pipe:
            for i, sid in zip(range(start, stop), ids, strict=True):
                if sid in skip:
                    pipe.sadd(f"job:{job_id}:all", sid)
                    continue
                # HSETNX on state: a re-run never resets a record that already moved on.
                pipe.hsetnx(f"sb:{sid}", "state", "pending")
                pipe.hsetnx(f"sb:{sid}", "created_at", now)  # and never moves its creation
                pipe.hset(f"sb:{sid}", mapping=cast(RedisMapping, {"id": sid, **fields, "updated_at": now}))
                pipe.sadd(f"sb:tenant:{tenant}", sid)
                pipe.sadd(f"job:{job_id}:all", sid)
                pipe.zadd(f"job:{job_id}:pending", {sid: i}, nx=True)
            pipe.hset(f"job:{job_id}", "submitted", stop)
            pipe.sadd("jobs:active", job_id)
            await pipe.execute()
        return ids

    async def get(self, job_id: str) -> JobRecord | None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(f"job:{job_id}")
            pipe.zcard(f"job:{job_id}:pending")
            data, pending = await pipe.execute()
        return JobRecord.from_hash(data, pending) if data else None

    async def tenant_job_ids(self, tenant: str) -> list[str]:
        """Every job the tenant created that Redis still holds (deleted ones too), sorted."""
        return sorted(cast(set[str], await self.redis.smembers(f"jobs:tenant:{tenant}")))

    async def sandbox_ids(self, job_id: str) -> list[str]:
        return sorted(cast(set[str], await self.redis.smembers(f"job:{job_id}:all")))

    async def mark_deleted(self, job_id: str) -> None:
        await self.redis.hset(f"job:{job_id}", "deleted", "1")

    async def queue_position(self, job_id: str, sandbox_id: str) -> int | None:
        return cast(int | None, await self.redis.zrank(f"job:{job_id}:pending", sandbox_id))

    async def waiting_reason(self, job_id: str) -> str | None:
        """Why the job's next queued sandbox waits, as the scheduler last wrote it on that record
        (``waiting for room: node-1 full (memory)``); None when nothing of it is queued or the
        scheduler has not tried its head yet."""
        head = cast(list[str], await self.redis.zrange(f"job:{job_id}:pending", 0, 0))
        if not head:
            return None
        state, reason = cast(list[str | None], await self.redis.hmget(f"sb:{head[0]}", ["state", "reason"]))
        return reason if state == "pending" and reason else None

    async def peek_many(self, k: int) -> list[tuple[str, str]]:
        """The next ``k`` (or fewer) admissions as (job, sandbox), in fair-share order, left queued."""
        flat = await self._peek_many(keys=["jobs:active"], args=[k])
        return list(zip(flat[::2], flat[1::2], strict=True))

    async def done_many(self, settled: list[tuple[str, str, bool]]) -> int:
        """Dequeue (job, sandbox, placed) each: admitted (placed) or ended (not), in one call;
        idempotent (one dequeued already is not counted again). Returns how many it dequeued."""
        if not settled:
            return 0
        args = [v for job_id, sandbox_id, placed in settled for v in (job_id, sandbox_id, "1" if placed else "0")]
        return int(await self._done_many(keys=["jobs:active"], args=args))

    async def queue_depth(self) -> tuple[int, int]:
        """(active jobs, their sandboxes not admitted yet): one SMEMBERS and a pipelined ZCARD each."""
        active = sorted(cast(set[str], await self.redis.smembers("jobs:active")))
        if not active:
            return 0, 0
        async with self.redis.pipeline(transaction=False) as pipe:
            for job in active:
                pipe.zcard(f"job:{job}:pending")
            sizes = await pipe.execute()
        return len(active), sum(sizes)

    async def active_job_ids(self) -> set[str]:
        """Jobs with sandboxes not admitted yet (and jobs the scheduler has not pruned yet)."""
        return cast(set[str], await self.redis.smembers("jobs:active"))

    async def exists(self, job_id: str) -> bool:
        return bool(await self.redis.exists(f"job:{job_id}"))

    async def is_over(self, job_id: str) -> bool:
        """Deleted, or gone from Redis altogether (expired, or lost with its data)."""
        deleted = (await self.redis.hmget(f"job:{job_id}", "deleted"))[0]
        return deleted == "1" or (deleted is None and not await self.exists(job_id))

    async def sandbox_states(self, sandbox_ids: list[str]) -> list[str | None]:
        """Each sandbox's state as its record holds it (None: no record), in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for sid in sandbox_ids:
                pipe.hget(f"sb:{sid}", "state")
            return cast(list[str | None], await pipe.execute())

    # ---- submission: creating a job's records, in chunks, survives an api restart ---------

    async def mark_submitting(self, job_id: str) -> None:
        await self.redis.sadd(_SUBMITTING, job_id)

    async def submitting(self) -> set[str]:
        """Jobs whose submission some api process started and did not finish."""
        return cast(set[str], await self.redis.smembers(_SUBMITTING))

    async def is_submitting(self, job_id: str) -> bool:
        return bool(await self.redis.sismember(_SUBMITTING, job_id))

    async def done_submitting(self, job_id: str) -> None:
        await self.redis.srem(_SUBMITTING, job_id)

    # ---- Redis lost its data: jobs queued again from SQL ----------------------------------

    async def is_durable(self) -> bool:
        """Whether Redis still holds what it held (the marker ``mark_durable`` set is there)."""
        return bool(await self.redis.exists(_DURABLE))

    async def mark_durable(self) -> None:
        await self.redis.set(_DURABLE, "1")

    async def mark_requeued(self, job_id: str, admitted: int) -> None:
        """A job queued again after Redis lost it: ``admitted`` of its sandboxes ended already
        (they count as admitted once, and its submission skips them)."""
        await self.redis.hset(f"job:{job_id}", mapping={"requeued": "1", "admitted": admitted})

    async def is_requeued(self, job_id: str) -> bool:
        return bool(await self.redis.hget(f"job:{job_id}", "requeued"))
