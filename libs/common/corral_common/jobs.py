"""Jobs: many sandboxes of one spec, queued durably in Redis and admitted by fair share.

Keys:
    job:<id>            hash: tenant, count, weight, priority, spec, labels, created_at,
                        submitted (records created so far), admitted (placed on a node)
    job:<id>:pending    zset: sandbox ids not admitted yet, scored by submission order
    jobs:active         set: jobs with pending sandboxes

The scheduler admits one sandbox at a time: ``peek`` names the job to serve next (highest
priority first, then the lowest admitted/weight: stride scheduling, so concurrent jobs get
admissions in proportion to their weights) and its oldest pending sandbox, without removing
it; once the sandbox is placed (or found ended) ``done`` removes it and counts it. A
scheduler that dies in between peeks the same sandbox again, and placement is idempotent
(the reservation ``resv:<id>`` survives), so nothing is lost or placed twice.
"""

import json
import time
from dataclasses import dataclass

import redis.asyncio as aioredis

from corral_common.redis_client import connect
from corral_common.sandboxes import SandboxSpec

MAX_JOB_SANDBOXES = 32000

# KEYS: jobs:active. Returns {job_id, sandbox_id} or false.
_PEEK = """
local best, best_prio, best_pass = nil, nil, nil
for _, job in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local f = redis.call('HMGET', 'job:' .. job, 'weight', 'priority', 'admitted', 'vstart')
  if not f[1] then
    redis.call('SREM', KEYS[1], job)
  elseif redis.call('ZCARD', 'job:' .. job .. ':pending') == 0 then
    -- all admitted (or not submitted yet: the submitter re-adds it)
    redis.call('SREM', KEYS[1], job)
  else
    local prio = tonumber(f[2] or '0')
    local pass = tonumber(f[4] or '0') + (tonumber(f[3] or '0') + 1) / tonumber(f[1])
    if best == nil or prio > best_prio or (prio == best_prio and pass < best_pass) then
      best, best_prio, best_pass = job, prio, pass
    end
  end
end
if best == nil then return false end
local head = redis.call('ZRANGE', 'job:' .. best .. ':pending', 0, 0)
return {best, head[1]}
"""

# KEYS: job:<id>, job:<id>:pending, jobs:active; ARGV: sandbox_id, placed (1/0)
_DONE = """
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 0 end
if ARGV[2] == '1' then redis.call('HINCRBY', KEYS[1], 'admitted', 1)
else redis.call('HINCRBY', KEYS[1], 'dropped', 1) end
if redis.call('ZCARD', KEYS[2]) == 0 then redis.call('SREM', KEYS[3], string.sub(KEYS[1], 5)) end
return 1
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

    @classmethod
    def from_hash(cls, data: dict[str, str], pending: int) -> "JobRecord":
        return cls(id=data["id"], tenant=data["tenant"], count=int(data["count"]), weight=float(data["weight"]),
                   priority=int(data.get("priority") or 0), spec=SandboxSpec.model_validate_json(data["spec"]),
                   labels=json.loads(data.get("labels") or "{}"), created_at=float(data["created_at"]),
                   submitted=int(data.get("submitted") or 0), admitted=int(data.get("admitted") or 0),
                   dropped=int(data.get("dropped") or 0), pending=pending, deleted=data.get("deleted") == "1",
                   vstart=float(data.get("vstart") or 0))


def sandbox_id_for(job_id: str, index: int) -> str:
    """Deterministic ids: a submitter that restarts re-creates the same sandboxes, not new ones."""
    return f"{job_id}-{index:05d}"


class JobStore:
    def __init__(self, redis: aioredis.Redis):
        self.redis = redis
        self._peek = redis.register_script(_PEEK)
        self._done = redis.register_script(_DONE)

    @classmethod
    def from_url(cls, url: str) -> "JobStore":
        return cls(connect(url))

    async def close(self) -> None:
        await self.redis.aclose()

    async def create_job(self, job_id: str, tenant: str, spec: SandboxSpec, count: int, *, weight: float = 1.0,
                         priority: int = 0, labels: dict[str, str] | None = None,
                         created_at: float | None = None) -> None:
        if not 1 <= count <= MAX_JOB_SANDBOXES:
            raise ValueError(f"count must be 1..{MAX_JOB_SANDBOXES}")
        # A job joins at the current virtual time (the least pass among active jobs), so it
        # shares from now on instead of catching up on admissions made before it existed.
        vstart = await self._virtual_time()
        mapping = {"vstart": repr(vstart), "id": job_id, "tenant": tenant, "count": count, "weight": repr(float(weight)),
                   "priority": priority, "spec": spec.model_dump_json(), "labels": json.dumps(labels or {}),
                   "created_at": repr(time.time() if created_at is None else created_at), "submitted": 0, "admitted": 0, "dropped": 0}
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(f"job:{job_id}", mapping=mapping)
            pipe.sadd(f"jobs:tenant:{tenant}", job_id)
            await pipe.execute()

    async def _virtual_time(self) -> float:
        passes = []
        for job in await self.redis.smembers("jobs:active"):
            weight, admitted, vstart = await self.redis.hmget(f"job:{job}", "weight", "admitted", "vstart")
            if weight:
                passes.append(float(vstart or 0) + int(admitted or 0) / float(weight))
        return min(passes, default=0.0)

    async def enqueue(self, job_id: str, tenant: str, spec: SandboxSpec, start: int, stop: int,
                      skip: frozenset[str] = frozenset()) -> list[str]:
        """Create the records of sandboxes [start, stop) and queue them, in one pipeline.
        Those in ``skip`` (ended already: a job queued again after Redis lost it) are only
        counted as the job's."""
        now = repr(time.time())
        spec_json = spec.model_dump_json()
        ids = [sandbox_id_for(job_id, i) for i in range(start, stop)]
        async with self.redis.pipeline(transaction=True) as pipe:
            for i, sid in zip(range(start, stop), ids, strict=True):
                if sid in skip:
                    pipe.sadd(f"job:{job_id}:all", sid)
                    continue
                # HSETNX on state: a re-run never resets a record that already moved on.
                pipe.hsetnx(f"sb:{sid}", "state", "pending")
                pipe.hsetnx(f"sb:{sid}", "created_at", now)  # and never moves its creation
                pipe.hset(f"sb:{sid}", mapping={"id": sid, "tenant": tenant, "spec": spec_json, "job_id": job_id,
                                                 "updated_at": now})
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
        return sorted(await self.redis.smembers(f"jobs:tenant:{tenant}"))

    async def sandbox_ids(self, job_id: str) -> list[str]:
        return sorted(await self.redis.smembers(f"job:{job_id}:all"))

    async def mark_deleted(self, job_id: str) -> None:
        await self.redis.hset(f"job:{job_id}", "deleted", "1")

    async def queue_position(self, job_id: str, sandbox_id: str) -> int | None:
        return await self.redis.zrank(f"job:{job_id}:pending", sandbox_id)

    async def peek(self) -> tuple[str, str] | None:
        """The job to serve next and its oldest pending sandbox (left queued)."""
        got = await self._peek(keys=["jobs:active"])
        return (got[0], got[1]) if got else None

    async def done(self, job_id: str, sandbox_id: str, placed: bool) -> bool:
        """Dequeue an admitted (placed=True) or ended (placed=False) sandbox; idempotent."""
        return bool(await self._done(keys=[f"job:{job_id}", f"job:{job_id}:pending", "jobs:active"],
                                     args=[sandbox_id, "1" if placed else "0"]))

    async def queue_depth(self) -> tuple[int, int]:
        """(active jobs, their sandboxes not admitted yet): one SMEMBERS and a pipelined ZCARD each."""
        active = sorted(await self.redis.smembers("jobs:active"))
        if not active:
            return 0, 0
        async with self.redis.pipeline(transaction=False) as pipe:
            for job in active:
                pipe.zcard(f"job:{job}:pending")
            sizes = await pipe.execute()
        return len(active), sum(sizes)
