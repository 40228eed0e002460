"""Per-tenant quotas, checked and counted in one Redis script so concurrent creates on any
number of api replicas can never pass a limit together (a read-then-write would let two
creates both see room for one).

What is counted (``quota:used:<tenant>``: sandboxes, cpu_milli, memory_mb, disk_mb) is what
the tenant's live sandboxes asked for. Each admission is an *entry* of
``quota:entries:<tenant>`` (``n|cpu_milli|memory_mb|disk_mb``, per sandbox): a sandbox is
one entry of n=1 under its own id; a job is one entry of n=count under the job id, admitted
whole at job create. A job therefore needs room for all its sandboxes when it is created (a
job of 50 over a quota of 40 is a 429 and nothing is queued): a job admitted piecemeal would
hold its queue forever behind the tenant's own quota, and the caller could not tell a job
that will finish from one that cannot. Each sandbox that ends gives its share back (the
api's terminal-event consumer, ``release``; once per sandbox even when an event is
delivered twice); a deleted job's unstarted rest is given back by ``drop``.

fncall calls/s: a token bucket per tenant in Redis (``quota:fncall:<tenant>``), refilled at
the quota's rate with a burst of one second's worth; a batch of n calls is admitted while the
bucket holds min(n, burst) tokens and takes all n (the bucket may go negative: the next calls
wait until the rate paid for the batch), so a batch bigger than the burst is not refused for
ever and the long-run rate still holds.
"""

import time
from dataclasses import dataclass

from redis import asyncio as aioredis

from corral_common.store.quota_ledger import COUNT_ENTRY_LUA, LEDGER_FIELDS, ledger_keys
from corral_common.store.state_nodes import cpu_milli
from corral_common.web.errors import TooManyRequests

QUOTA_KEYS = ("max_sandboxes", "max_cpu", "max_memory_mb", "max_disk_mb", "max_image_bytes", "max_fncall_per_s")
UNLIMITED = -1

# KEYS: used hash, entries hash. ARGV: entry id, n, cpu_milli, memory_mb, disk_mb (each), the
# limits of sandboxes, cpu_milli, memory_mb, disk_mb (-1: none), the time. Returns {0} admitted
# (also when the entry is there already: a retried create), or {1, field, limit, used}. An
# entry is n|cpu_milli|memory_mb|disk_mb|admitted-at.
_ADMIT = COUNT_ENTRY_LUA + """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {0} end
local n = tonumber(ARGV[2])
local ask = {n, n * tonumber(ARGV[3]), n * tonumber(ARGV[4]), n * tonumber(ARGV[5])}
local fields = {'sandboxes', 'cpu_milli', 'memory_mb', 'disk_mb'}  -- LEDGER_FIELDS
local used = redis.call('HMGET', KEYS[1], unpack(fields))
for i = 1, 4 do
  local limit = tonumber(ARGV[5 + i])
  local have = tonumber(used[i] or '0')
  if limit >= 0 and have + ask[i] > limit then return {1, fields[i], limit, have} end
end
count_entry(KEYS[1], KEYS[2], ARGV[1], n, ARGV[3], ARGV[4], ARGV[5], ARGV[10])
return {0}
"""

# Give back one sandbox of an entry (KEYS: used, entries, the entry's released set; ARGV: entry
# id, sandbox id, ttl of the released set), or all that is left of it when ARGV[2] is ''.
# Returns how many sandboxes were given back.
_RELEASE = """
local entry = redis.call('HGET', KEYS[2], ARGV[1])
if not entry then return 0 end
local n, cpu, mem, disk, at = string.match(entry, '^(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
n, cpu, mem, disk = tonumber(n), tonumber(cpu), tonumber(mem), tonumber(disk)
local give = n
if ARGV[2] ~= '' and ARGV[2] ~= ARGV[1] then
  if redis.call('SADD', KEYS[3], ARGV[2]) == 0 then return 0 end
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[3]))
  give = 1
end
redis.call('HINCRBY', KEYS[1], 'sandboxes', -give)
redis.call('HINCRBY', KEYS[1], 'cpu_milli', -give * cpu)
redis.call('HINCRBY', KEYS[1], 'memory_mb', -give * mem)
redis.call('HINCRBY', KEYS[1], 'disk_mb', -give * disk)
if n - give <= 0 then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('DEL', KEYS[3])
else
  redis.call('HSET', KEYS[2], ARGV[1], (n - give) .. '|' .. cpu .. '|' .. mem .. '|' .. disk .. '|' .. at)
end
return give
"""

# A job queued again after Redis lost its data (jobs/service.py requeue_lost) is counted again
# under its own entry, as its admission counted it: the n of its sandboxes that had not ended,
# with no limit checked (it was admitted; refusing it now would fail a job already running).
# Its sandboxes a node registered again meanwhile were counted under their own ids
# (StateStore.restore_sandbox): they are moved into the job's entry, so each counts once and
# its end gives back to the job's entry like any job sandbox's. KEYS: used, entries. ARGV: job
# id, n, cpu_milli, memory_mb, disk_mb (each), the time. Returns 1, or 0 when the job's entry
# is there already.
_READMIT_JOB = COUNT_ENTRY_LUA + """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
local cursor = '0'
repeat
  local page = redis.call('HSCAN', KEYS[2], cursor, 'MATCH', ARGV[1] .. '-*', 'COUNT', 1000)
  cursor = page[1]
  for i = 1, #page[2], 2 do
    local n, cpu, mem, disk = string.match(page[2][i + 1], '^(%d+)|(%d+)|(%d+)|(%d+)|')
    n = tonumber(n)
    redis.call('HINCRBY', KEYS[1], 'sandboxes', -n)
    redis.call('HINCRBY', KEYS[1], 'cpu_milli', -n * tonumber(cpu))
    redis.call('HINCRBY', KEYS[1], 'memory_mb', -n * tonumber(mem))
    redis.call('HINCRBY', KEYS[1], 'disk_mb', -n * tonumber(disk))
    redis.call('HDEL', KEYS[2], page[2][i])
  end
until cursor == '0'
if tonumber(ARGV[2]) > 0 then
  count_entry(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
end
return 1
"""

# KEYS: the bucket. ARGV: rate per second, burst, calls. Returns {1} or {0, tokens (x1000)}.
_TAKE_TOKENS = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
local rate, burst, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1] or ARGV[2])
local at = tonumber(state[2] or t)
tokens = math.min(burst, tokens + (t - at) * rate)
if tokens < math.min(n, burst) then
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(t))
  redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 60)
  return {0, math.floor(tokens * 1000)}
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - n), 'at', tostring(t))
redis.call('EXPIRE', KEYS[1], math.ceil((burst + n) / rate) + 60)
return {1}
"""

# A job's released set lives as long as a job may (a week), then Redis forgets it.
RELEASED_TTL_S = 7 * 86400
_FIELD_QUOTA = {"sandboxes": "max_sandboxes", "cpu_milli": "max_cpu", "memory_mb": "max_memory_mb",
                "disk_mb": "max_disk_mb"}


@dataclass(frozen=True)
class Demand:
    """What one admission asks for: ``count`` sandboxes of this size each."""

    count: int
    cpu: float
    memory_mb: int
    disk_mb: int

    def argv(self) -> list[int]:
        return [self.count, cpu_milli(self.cpu), self.memory_mb, self.disk_mb]


def limits_argv(quotas: dict) -> list[int]:
    """The Lua limits of a tenant's quotas (cpu in milli-cores; None/absent: -1, unlimited)."""
    def limit(key: str, scale: float = 1) -> int:
        value = quotas.get(key)
        return UNLIMITED if value is None else int(round(value * scale))
    return [limit("max_sandboxes"), limit("max_cpu", 1000), limit("max_memory_mb"), limit("max_disk_mb")]


def reported(field: str, value: int) -> float | int:
    """A counted value as the quota names it (cpu back in cores)."""
    return value / 1000 if field == "cpu_milli" else value


def quota_exceeded(quota: str, limit: float | int, used: float | int, loc: list, message: str = "") -> TooManyRequests:
    return TooManyRequests(message or f"quota {quota} exceeded: limit {limit}, in use {used}; nothing was created",
                           code="quota_exceeded", loc=loc, extra={"quota": quota, "limit": limit, "used": used,
                                                                  "loc": loc})


def fncall_burst(rate: float) -> float:
    """One second's worth of calls, at least one call."""
    return max(1.0, rate)


class QuotaLedger:
    def __init__(self, redis: aioredis.Redis):
        self.redis = redis
        self._admit = redis.register_script(_ADMIT)
        self._release = redis.register_script(_RELEASE)
        self._readmit_job = redis.register_script(_READMIT_JOB)
        self._take = redis.register_script(_TAKE_TOKENS)

    @staticmethod
    def _keys(tenant: str) -> list[str]:
        return ledger_keys(tenant)

    async def admit(self, tenant: str, entry: str, demand: Demand, quotas: dict, loc: list) -> None:
        """Count ``demand`` under ``entry``, or raise the 429 of the first quota it would pass."""
        out = await self._admit(keys=self._keys(tenant), args=[entry, *demand.argv(), *limits_argv(quotas), repr(time.time())])
        if int(out[0]) == 0:
            return
        field = out[1].decode() if isinstance(out[1], bytes) else out[1]
        ask = dict(zip(LEDGER_FIELDS,
                       (demand.count, demand.count * cpu_milli(demand.cpu), demand.count * demand.memory_mb,
                        demand.count * demand.disk_mb), strict=True))[field]
        quota, limit, used = _FIELD_QUOTA[field], reported(field, int(out[2])), reported(field, int(out[3]))
        raise quota_exceeded(quota, limit, used, loc, f"quota {quota} exceeded: limit {limit}, in use {used}, "
                             f"this request asks for {reported(field, ask)} more; nothing was created")

    async def readmit_job(self, tenant: str, job_id: str, demand: Demand) -> bool:
        """Count a job queued again after Redis lost its data (``demand``: its sandboxes not
        ended); False: its entry is there already."""
        return bool(await self._readmit_job(keys=self._keys(tenant), args=[job_id, *demand.argv(), repr(time.time())]))

    async def release(self, tenant: str, entry: str, sandbox_id: str = "") -> int:
        """Give back one sandbox of ``entry`` (``sandbox_id``), or the whole entry ('')."""
        return int(await self._release(keys=[*self._keys(tenant), f"quota:released:{tenant}:{entry}"],
                                       args=[entry, sandbox_id, RELEASED_TTL_S]))

    async def entries(self, tenant: str) -> dict[str, tuple[int, float]]:
        """entry id → (sandboxes still counted under it, when it was admitted)."""
        out = {}
        for k, v in (await self.redis.hgetall(self._keys(tenant)[1])).items():
            n, *_, at = (v.decode() if isinstance(v, bytes) else v).split("|")
            out[k.decode() if isinstance(k, bytes) else k] = (int(n), float(at))
        return out

    async def used(self, tenant: str) -> dict[str, float | int]:
        raw = await self.redis.hgetall(self._keys(tenant)[0])
        values = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}
        return {"sandboxes": values.get("sandboxes", 0), "cpu": values.get("cpu_milli", 0) / 1000,
                "memory_mb": values.get("memory_mb", 0), "disk_mb": values.get("disk_mb", 0)}

    async def take_fncall(self, tenant: str, calls: int, rate: float | None, loc: list) -> None:
        if rate is None:
            return
        out = await self._take(keys=[f"quota:fncall:{tenant}"], args=[rate, fncall_burst(rate), calls])
        if int(out[0]) == 1:
            return
        error = quota_exceeded("max_fncall_per_s", rate, rate, loc,
                               f"quota max_fncall_per_s exceeded: at most {rate} calls/s; retry after Retry-After")
        error.retry_after_s = max(1, int((min(calls, fncall_burst(rate)) - int(out[1]) / 1000) / rate + 0.999))
        raise error
