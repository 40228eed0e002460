"""Hot state in Redis: sandbox records, node heartbeats and capacity reservations.

Redis holds what must be read fast and can be rebuilt; SQL keeps terminal history. Every
state change is a compare-and-set in a Lua script, so two services racing on one sandbox
(the scheduler's node-lost reaper and a node-agent reporting, say) cannot both win.
"""

import bisect
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple, cast

import redis.asyncio as aioredis

from corral_common.contracts.images import ResolvedImage
from corral_common.contracts.sandboxes import (
    ALLOWED_TRANSITIONS,
    DEFAULT_VM_MEMORY_OVERHEAD_MB,
    TERMINAL_STATES,
    BackendKind,
    RuntimeInfo,
    SandboxSpec,
    SandboxState,
    Usage,
    reserved_memory_mb,
)
from corral_common.store.quota_ledger import COUNT_ENTRY_LUA, ledger_keys
from corral_common.store.redis_client import connect

# The store's client decodes every reply (redis_client.connect, decode_responses=True), but
# redis-py's types do not follow that setting: replies are cast to str where they are read, and
# mappings written are typed as redis-py takes them (Mapping's key type is invariant).
RedisMapping = Mapping[Any, Any]

# Terminal records stay readable in Redis this long; SQL keeps them for good.
TERMINAL_TTL_S = 3600

# Returns {changed, previous state, tenant, node_id} so callers need no second read; a
# terminal transition also returns the whole record as it ended (HGETALL's flat list).
_TRANSITION = """
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur then return {0, '', '', ''} end
if not string.find(',' .. ARGV[1] .. ',', ',' .. cur .. ',', 1, true) then return {0, cur, '', ''} end
for i = 3, #ARGV, 2 do
  if ARGV[i] == 'started_at' then redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1])  -- a resume keeps the first start
  else redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
if tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
local who = redis.call('HMGET', KEYS[1], 'tenant', 'node_id')
local out = {1, cur, who[1] or '', who[2] or ''}
if tonumber(ARGV[2]) > 0 then
  for _, v in ipairs(redis.call('HGETALL', KEYS[1])) do out[#out + 1] = v end
end
return out
"""

# What a placement attempt reads, in one round trip (it was four: the record, the live node
# ids, their hashes, the reservation). KEYS: sb:<id>, resv:<id>; ARGV: oldest live heartbeat.
# Returns {record (flat HGETALL), reservation or '', node, used, node, used...}.
_PLACEMENT_VIEW = """
local out = {redis.call('HGETALL', KEYS[1]), redis.call('GET', KEYS[2]) or ''}
for _, node in ipairs(redis.call('ZRANGEBYSCORE', 'nodes', ARGV[1], '+inf')) do
  out[#out + 1] = redis.call('HGETALL', 'node:' .. node)
  out[#out + 1] = redis.call('HGETALL', 'node:' .. node .. ':used')
end
return out
"""

# Why a pending sandbox waits (the scheduler found no room): only while it is still pending.
_SET_WAITING_REASON = """
if redis.call('HGET', KEYS[1], 'state') ~= 'pending' then return 0 end
redis.call('HSET', KEYS[1], 'reason', ARGV[1])
return 1
"""

# Count a sandbox on its node (the used counters, its reservation resv:<id> = node|cpu|mem|pids|disk
# and the node's sandbox set); shared by reserve and restore.
_TAKE = """
local function take(used, resv, members, sandbox, node, cpu, mem, pids, disk)
  redis.call('HINCRBY', used, 'cpu_milli', cpu)
  redis.call('HINCRBY', used, 'memory_mb', mem)
  redis.call('HINCRBY', used, 'sandboxes', 1)
  redis.call('HINCRBY', used, 'pids', pids)
  redis.call('HINCRBY', used, 'disk_mb', disk)
  local value = node .. '|' .. cpu .. '|' .. mem .. '|' .. pids .. '|' .. disk
  redis.call('SET', resv, value)
  redis.call('SADD', members, sandbox)
  return value
end
"""

# KEYS: sandbox record keys. Returns {"state|backend", count, ...}; a key that is gone (expired
# between the scan and the call) or not a hash is skipped. The backend is read from the spec's JSON
# (pydantic writes it compact, and "backend" is its first field of that name).
_COUNT = """
local counts, order = {}, {}
for _, key in ipairs(KEYS) do
  if redis.call('TYPE', key).ok == 'hash' then
    local f = redis.call('HMGET', key, 'state', 'spec')
    if f[1] then
      local backend = f[2] and string.match(f[2], '"backend":"([^"]*)"') or ''
      local k = f[1] .. '|' .. backend
      if not counts[k] then counts[k] = 0; order[#order + 1] = k end
      counts[k] = counts[k] + 1
    end
  end
end
local out = {}
for _, k in ipairs(order) do out[#out + 1] = k; out[#out + 1] = counts[k] end
return out
"""

_RESERVE = _TAKE + """
local existing = redis.call('GET', KEYS[3])
if existing then return existing end
local cap = redis.call('HMGET', KEYS[1], 'cpu_milli', 'memory_mb', 'max_sandboxes', 'heartbeat_at', 'pids', 'disk_mb')
if not cap[1] then return false end
if tonumber(ARGV[5]) - tonumber(cap[4]) > tonumber(ARGV[6]) then return false end
local used = redis.call('HMGET', KEYS[2], 'cpu_milli', 'memory_mb', 'sandboxes', 'pids', 'disk_mb')
local ucpu = tonumber(used[1] or '0') + tonumber(ARGV[1])
local umem = tonumber(used[2] or '0') + tonumber(ARGV[2])
local usb = tonumber(used[3] or '0') + 1
if ucpu > tonumber(cap[1]) or umem > tonumber(cap[2]) or usb > tonumber(cap[3]) then return false end
-- pids and disk: counted only against nodes that advertise them (older agents did not).
-- compat(53beb59 pids, 653b94c disk; 2026-12-01): delete the cap[5]/cap[6] nil checks when no node
-- runs an agent older than 653b94c (every heartbeat writes both).
local upids = tonumber(used[4] or '0') + tonumber(ARGV[7])
if cap[5] and upids > tonumber(cap[5]) then return false end
local udisk = tonumber(used[5] or '0') + tonumber(ARGV[8])
if cap[6] and udisk > tonumber(cap[6]) then return false end
return take(KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4], ARGV[1], ARGV[2], ARGV[7], ARGV[8])
"""

_RELEASE = """
local existing = redis.call('GET', KEYS[1])
if not existing then return 0 end
local node, cpu, mem, pids, disk = string.match(existing, '^([^|]+)|([^|]+)|([^|]+)|?([^|]*)|?([^|]*)')
local used = 'node:' .. node .. ':used'
redis.call('HINCRBY', used, 'cpu_milli', -tonumber(cpu))
redis.call('HINCRBY', used, 'memory_mb', -tonumber(mem))
redis.call('HINCRBY', used, 'sandboxes', -1)
-- reservations made before pids (and then disk) were counted have fewer fields.
-- compat(53beb59 pids, 653b94c disk; 2026-12-01): delete the optional fields 7 days (the longest timeout_s) after every
-- scheduler runs 653b94c or later (a reservation lives as long as its sandbox).
if pids ~= '' then redis.call('HINCRBY', used, 'pids', -tonumber(pids)) end
if disk ~= '' then redis.call('HINCRBY', used, 'disk_mb', -tonumber(disk)) end
redis.call('DEL', KEYS[1])
redis.call('SREM', 'sb:node:' .. node, ARGV[1])
return 1
"""


# A node-agent re-registers a sandbox it runs (after Redis lost it). KEYS: sb:<id>,
# node:<node>:used, resv:<id>, sb:node:<node>, node:<node>:lost, the tenant's quota ledger
# (used, entries); ARGV: id, node, cpu, mem, pids, disk, its quota size (cpu_milli, memory_mb,
# disk_mb), the time, then the record's field/value pairs. Returns {outcome, detail}: see
# RestoreOutcome. A record written again is counted in its tenant's quota ledger under its own
# id, unless its job's entry is there (a job admitted again counts it already).
_RESTORE = _TAKE + COUNT_ENTRY_LUA + """
local state = redis.call('HGET', KEYS[1], 'state')
local outcome = 'kept'
if not state then
  -- The reaper declared this node lost (and failed what it held): its records ended, even
  -- once they expire. Only a Redis that lost its data has neither record nor tombstone.
  if redis.call('EXISTS', KEYS[5]) == 1 then return {'lost', ''} end
  for i = 11, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
  outcome = 'restored'
  local job = redis.call('HGET', KEYS[1], 'job_id') or ''
  if redis.call('HEXISTS', KEYS[7], ARGV[1]) == 0 and (job == '' or redis.call('HEXISTS', KEYS[7], job) == 0) then
    count_entry(KEYS[6], KEYS[7], ARGV[1], 1, ARGV[7], ARGV[8], ARGV[9], ARGV[10])
  end
elseif state == 'terminated' or state == 'failed' then
  return {'ended', state}
else
  local node = redis.call('HGET', KEYS[1], 'node_id') or ''
  if state ~= 'pending' and node ~= '' and node ~= ARGV[2] then return {'elsewhere', node} end
  if state == 'pending' or state == 'scheduled' or state == 'starting' then
    -- A record re-created meanwhile (a job re-submitted) or one whose start went unrecorded:
    -- the node says where it runs and how.
    local own = {state = true, node_id = true, started_at = true, runtime = true, updated_at = true}
    for i = 11, #ARGV, 2 do
      if own[ARGV[i]] then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
    end
    outcome = 'updated'
  end
end
local who = redis.call('HMGET', KEYS[1], 'tenant', 'job_id')
redis.call('SADD', 'sb:tenant:' .. who[1], ARGV[1])
if who[2] and who[2] ~= '' then redis.call('SADD', 'job:' .. who[2] .. ':all', ARGV[1]) end
if redis.call('EXISTS', KEYS[3]) == 0 then
  take(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
else
  redis.call('SADD', KEYS[4], ARGV[1])
end
return {outcome, ''}
"""


class RestoreOutcome(StrEnum):
    """What ``StateStore.restore_sandbox`` did with a sandbox a node says it runs."""

    restored = "restored"  # no record: written from the node's own
    updated = "updated"  # a record not placed (or not yet running) there: now says the node runs it
    kept = "kept"  # the record already said so (its reservation and sets were made sure of)
    ended = "ended"  # the record ended (deleted, failed as node_lost...): the node must stop it
    elsewhere = "elsewhere"  # the record runs it on another node: this copy must stop
    lost = "lost"  # no record, but the node was declared lost meanwhile: stop it


def _sandbox_key(sandbox_id: str) -> str:
    return f"sb:{sandbox_id}"



@dataclass
class SandboxRecord:
    id: str
    tenant: str
    state: SandboxState
    spec: SandboxSpec
    created_at: float
    updated_at: float
    reason: str | None = None
    # Why it failed, in words (reason is the code): a failed start's message, what no node has.
    error: str | None = None
    node_id: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    usage: Usage | None = None
    delete_requested: bool = False
    # How the node runs it (backend.describe(): accelerator, machine, image transport...).
    runtime: RuntimeInfo = field(default_factory=RuntimeInfo)
    # The only node that may take it (a restored snapshot lives on that node's disk).
    required_node: str | None = None
    # The job it belongs to (jobs.enqueue writes it).
    job_id: str | None = None
    # Its environment as the api resolved it at create (layers, owner, config): what the
    # scheduler places it by and the node starts it on. None: nothing to resolve (a disk
    # image alone), a restored snapshot, or a record from before pins (the node resolves the name).
    # compat(d03aa3f, 2026-12-07): the unpinned cases go once snapshot and job rows keep their pin
    # and 7 days (the longest timeout_s) have passed since every api runs d03aa3f or later.
    image: ResolvedImage | None = None

    @property
    def why(self) -> str:
        """`` (reason: error)`` for a message about its state; empty when nothing is recorded."""
        said = ": ".join(s for s in (self.reason, self.error) if s)
        return f" ({said})" if said else ""

    @classmethod
    def from_hash(cls, data: dict[str, str]) -> "SandboxRecord":
        def opt_float(key: str) -> float | None:
            return float(data[key]) if data.get(key) else None

        return cls(
            id=data["id"],
            tenant=data["tenant"],
            state=SandboxState(data["state"]),
            spec=SandboxSpec.model_validate_json(data["spec"]),
            created_at=float(data["created_at"]),
            updated_at=float(data.get("updated_at") or data["created_at"]),
            reason=data.get("reason") or None,
            error=data.get("error") or None,
            node_id=data.get("node_id") or None,
            started_at=opt_float("started_at"),
            ended_at=opt_float("ended_at"),
            usage=Usage.model_validate_json(data["usage"]) if data.get("usage") else None,
            delete_requested=data.get("delete_requested") == "1",
            runtime=cast(RuntimeInfo, json.loads(data["runtime"])) if data.get("runtime") else RuntimeInfo(),
            required_node=data.get("required_node") or None,
            job_id=data.get("job_id") or None,
            image=ResolvedImage.model_validate_json(data["image"]) if data.get("image") else None,
        )

    def to_hash(self) -> dict[str, str]:
        """The Redis hash of this record (from_hash's inverse; empty fields are left out)."""
        data = {"id": self.id, "tenant": self.tenant, "state": self.state.value, "spec": self.spec.model_dump_json(),
                "created_at": repr(self.created_at), "updated_at": repr(self.updated_at)}
        optional = {"reason": self.reason, "error": self.error, "node_id": self.node_id, "required_node": self.required_node,
                    "job_id": self.job_id, "started_at": None if self.started_at is None else repr(self.started_at),
                    "ended_at": None if self.ended_at is None else repr(self.ended_at),
                    "usage": self.usage.model_dump_json() if self.usage else None,
                    "runtime": json.dumps(self.runtime, sort_keys=True) if self.runtime else None,
                    "delete_requested": "1" if self.delete_requested else None,
                    "image": self.image.model_dump_json() if self.image else None}
        return data | {k: v for k, v in optional.items() if v}


class Transition(NamedTuple):
    changed: bool
    previous: SandboxState | None
    tenant: str
    node_id: str | None
    ended: SandboxRecord | None = None  # a terminal transition's record, as it ended


@dataclass
class NodeInfo:
    node_id: str
    url: str
    cpu_milli: int
    memory_mb: int
    max_sandboxes: int
    heartbeat_at: float
    used_cpu_milli: int = 0
    used_memory_mb: int = 0
    used_sandboxes: int = 0
    # Tasks the node's sandboxes may take together (its cgroup pids cap less what its fncall
    # workers may use); None: a node from before the cap, nothing counted.
    # compat(53beb59, 2026-12-01): None goes when no node runs an agent older than 53beb59.
    pids: int | None = None
    used_pids: int = 0
    # Sandbox kinds the node can run; nodes from before VM backends advertised none.
    # compat(779e9cf, 2026-11-29): the default goes when no node runs an agent older than 779e9cf.
    backends: tuple[str, ...] = (BackendKind.container,)
    accelerator: str = ""
    vm_memory_overhead_mb: int = DEFAULT_VM_MEMORY_OVERHEAD_MB
    # Room for sandboxes' disks (disk_mb); None: a node from before disks were scheduled.
    # compat(653b94c, 2026-12-01): None goes when no node runs an agent older than 653b94c.
    disk_mb: int | None = None
    used_disk_mb: int = 0
    # Memory the node measured (working_set_mb, peak_working_set_mb, swap_mb, mib_seconds, and limit_mb:
    # its physical claim, the node cgroup's limit);
    # None: a node that does not sample (no cgroups, or from before accounting).
    # compat(be37c41, 2026-12-01): "from before accounting" goes when no node runs an agent older than
    # be37c41; a node without cgroups still sends none.
    memory: dict[str, float] | None = None
    # Containers its warm pool had ready at its last heartbeat, by shape (warm_pool_shape).
    warm: dict[str, int] = field(default_factory=dict)

    def reserved_memory_mb(self, spec: SandboxSpec) -> int:
        """What a sandbox of this spec takes from this node's memory: its request (and a VM's
        overhead)."""
        return reserved_memory_mb(spec.backend, spec.reservation.memory_mb, self.vm_memory_overhead_mb)

    def reserved_pids(self, spec: SandboxSpec) -> int:
        return spec.reservation.pids

    @property
    def free_pids(self) -> int | None:
        """None: the node counts no pids (it predates the node pids cap)."""
        return None if self.pids is None else self.pids - self.used_pids

    @property
    def free_cpu_milli(self) -> int:
        return self.cpu_milli - self.used_cpu_milli

    @property
    def free_memory_mb(self) -> int:
        return self.memory_mb - self.used_memory_mb

    @property
    def free_sandboxes(self) -> int:
        return self.max_sandboxes - self.used_sandboxes

    @property
    def free_disk_mb(self) -> int | None:
        return None if self.disk_mb is None else self.disk_mb - self.used_disk_mb


def cpu_milli(cpu: float) -> int:
    return max(1, int(round(cpu * 1000)))


def _pairs(flat: list) -> dict:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _node_infos(rows: list[dict]) -> list[NodeInfo]:
    """NodeInfo of each (node hash, used hash) pair in ``rows``; a node whose hash is gone is skipped."""
    nodes = []
    for info, used in zip(rows[::2], rows[1::2], strict=True):
        if not info:
            continue
        nodes.append(NodeInfo(
            node_id=info["node_id"], url=info["url"], cpu_milli=int(info["cpu_milli"]),
            memory_mb=int(info["memory_mb"]), max_sandboxes=int(info["max_sandboxes"]),
            heartbeat_at=float(info["heartbeat_at"]), used_cpu_milli=int(used.get("cpu_milli", 0)),
            used_memory_mb=int(used.get("memory_mb", 0)), used_sandboxes=int(used.get("sandboxes", 0)),
            backends=tuple(info["backends"].split(",")) if info.get("backends") else (BackendKind.container,),
            accelerator=info.get("accelerator", ""),
            vm_memory_overhead_mb=int(info.get("vm_memory_overhead_mb") or DEFAULT_VM_MEMORY_OVERHEAD_MB),
            pids=int(info["pids"]) if info.get("pids") else None, used_pids=int(used.get("pids", 0)),
            disk_mb=int(info["disk_mb"]) if info.get("disk_mb") else None,
            used_disk_mb=int(used.get("disk_mb", 0)),
            memory=json.loads(info["memory"]) if info.get("memory") else None,
            warm=json.loads(info["warm"]) if info.get("warm") else {},
        ))
    return nodes


class PlacementView(NamedTuple):
    record: "SandboxRecord | None"
    held: str | None  # the node holding its reservation
    nodes: list[NodeInfo]  # live ones


class StateStore:
    def __init__(self, redis: aioredis.Redis):
        self.redis = redis
        self._transition = redis.register_script(_TRANSITION)
        self._reserve = redis.register_script(_RESERVE)
        self._release = redis.register_script(_RELEASE)
        self._restore = redis.register_script(_RESTORE)
        self._count = redis.register_script(_COUNT)
        self._set_waiting_reason = redis.register_script(_SET_WAITING_REASON)
        self._placement_view = redis.register_script(_PLACEMENT_VIEW)

    @classmethod
    def from_url(cls, url: str, *, max_connections: int = 100, pool_timeout_s: float = 5.0) -> "StateStore":
        """On a bounded pool that survives a Redis restart (``corral_common.store.redis_client``)."""
        return cls(connect(url, max_connections=max_connections, pool_timeout_s=pool_timeout_s))

    async def close(self) -> None:
        await self.redis.aclose()

    async def ping(self) -> None:
        """Whether Redis answers (raises when it does not)."""
        await self.redis.ping()

    # --- sandboxes -------------------------------------------------------------------

    async def create_sandbox(self, sandbox_id: str, tenant: str, spec: SandboxSpec, *,
                             required_node: str | None = None, image: ResolvedImage | None = None) -> SandboxRecord:
        now = time.time()
        mapping = {
            "id": sandbox_id, "tenant": tenant, "state": SandboxState.pending.value,
            "spec": spec.model_dump_json(), "created_at": repr(now), "updated_at": repr(now),
        }
        if required_node:
            mapping["required_node"] = required_node
        if image is not None:
            mapping["image"] = image.model_dump_json()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(_sandbox_key(sandbox_id), mapping=cast(RedisMapping, mapping))
            pipe.sadd(f"sb:tenant:{tenant}", sandbox_id)
            await pipe.execute()
        return SandboxRecord.from_hash(mapping)

    async def set_sandbox_spec(self, sandbox_id: str, spec: SandboxSpec) -> bool:
        """Replace a live record's spec (a changed egress policy); False when it is gone."""
        key = _sandbox_key(sandbox_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.exists(key)
            pipe.hset(key, mapping={"spec": spec.model_dump_json(), "updated_at": repr(time.time())})
            existed, _ = await pipe.execute()
        if not existed:
            await self.redis.delete(key)  # hset made a stub of a record that had expired
        return bool(existed)

    async def get_sandbox(self, sandbox_id: str) -> SandboxRecord | None:
        data = await self.redis.hgetall(_sandbox_key(sandbox_id))
        return SandboxRecord.from_hash(cast(dict[str, str], data)) if data else None

    async def list_sandboxes_page(self, tenant: str, *, limit: int, after: str | None = None,
                                  keep: Callable[["SandboxRecord"], bool] = lambda _: True,
                                  ) -> tuple[list["SandboxRecord"], str | None]:
        """Up to ``limit`` of the tenant's records that ``keep`` accepts, in id order after
        ``after``, and the id to continue after (None: no more). Reads only as many records
        as the page needs (in pipelined chunks), so a page costs the same at 10,000 sandboxes."""
        ids = sorted(cast(set[str], await self.redis.smembers(f"sb:tenant:{tenant}")))
        i = bisect.bisect_right(ids, after) if after else 0
        out: list[SandboxRecord] = []
        chunk = max(limit, 64)
        while i < len(ids) and len(out) < limit:
            batch = ids[i:i + chunk]
            async with self.redis.pipeline(transaction=False) as pipe:
                for sandbox_id in batch:
                    pipe.hgetall(_sandbox_key(sandbox_id))
                rows = await pipe.execute()
            for row in rows:
                i += 1
                if row:
                    record = SandboxRecord.from_hash(row)
                    if keep(record):
                        out.append(record)
                        if len(out) == limit:
                            break
        return out, (out[-1].id if len(out) == limit and i < len(ids) else None)

    async def list_sandboxes(self, tenant: str) -> list[SandboxRecord]:
        ids = sorted(cast(set[str], await self.redis.smembers(f"sb:tenant:{tenant}")))
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for sandbox_id in ids:
                pipe.hgetall(_sandbox_key(sandbox_id))
            rows = await pipe.execute()
        gone = [sid for sid, row in zip(ids, rows) if not row]
        if gone:  # expired terminal records: forget them in the index too
            await self.redis.srem(f"sb:tenant:{tenant}", *gone)
        return [SandboxRecord.from_hash(row) for row in rows if row]

    async def transition(self, sandbox_id: str, target: SandboxState, **fields: Any) -> tuple[bool, SandboxState | None]:
        """Move to ``target`` if the current state allows it; returns (changed, previous state)."""
        done = await self.transition_ex(sandbox_id, target, **fields)
        return done.changed, done.previous

    async def transition_ex(self, sandbox_id: str, target: SandboxState, **fields: Any) -> "Transition":
        """Like ``transition``, also returning the record's tenant and node (and, once it
        ended, the record itself, read in the same atomic step)."""
        allowed_from = [s.value for s, nxt in ALLOWED_TRANSITIONS.items() if target in nxt]
        now = time.time()
        values: dict[str, str] = {"state": target.value, "updated_at": repr(now)}
        if target is SandboxState.running:
            values["started_at"] = repr(now)
        if target in TERMINAL_STATES:
            values["ended_at"] = repr(now)
        for key, value in fields.items():
            if value is None:
                continue
            if hasattr(value, "model_dump_json"):
                values[key] = value.model_dump_json()
            elif isinstance(value, dict):
                values[key] = json.dumps(value, sort_keys=True)
            else:
                values[key] = str(value)
        ttl = TERMINAL_TTL_S if target in TERMINAL_STATES else 0
        argv: list[str] = [",".join(allowed_from), str(ttl)]
        for key, value in values.items():
            argv += [key, value]
        changed, previous, tenant, node_id, *flat = await self._transition(keys=[_sandbox_key(sandbox_id)], args=argv)
        ended = SandboxRecord.from_hash(dict(zip(flat[::2], flat[1::2], strict=True))) if flat else None
        return Transition(bool(changed), SandboxState(previous) if previous else None, tenant, node_id or None, ended)

    async def set_waiting_reason(self, sandbox_id: str, reason: str) -> bool:
        """Say why a pending sandbox waits (False: it is no longer pending). Leaving pending
        clears it (the scheduled transition writes an empty reason)."""
        return bool(await self._set_waiting_reason(keys=[_sandbox_key(sandbox_id)], args=[reason]))

    async def mark_delete_requested(self, sandbox_id: str) -> None:
        await self.redis.hset(_sandbox_key(sandbox_id), "delete_requested", "1")

    # --- nodes and capacity ----------------------------------------------------------

    async def heartbeat(self, node_id: str, url: str, cpu_capacity: float, memory_mb: int, max_sandboxes: int, *,
                        backends: tuple[str, ...] | list[str] = (BackendKind.container,), accelerator: str = "",
                        vm_memory_overhead_mb: int = DEFAULT_VM_MEMORY_OVERHEAD_MB, pids: int | None = None,
                        disk_mb: int | None = None, memory: dict[str, float] | None = None,
                        warm: dict[str, int] | None = None) -> None:
        """``pids``: tasks the node's sandboxes may take together; ``disk_mb``: room for their
        disks (None: not counted); ``memory``: what its cgroup measured (working set, peak,
        swap, memory·time: see node-agent memory/accounting.py); ``warm``: containers its warm
        pool has ready, by shape (corral_common.contracts.sandboxes.warm_pool_shape)."""
        now = time.time()  # (cpu_milli: a node left no cpu advertises 0, not cpu_milli()'s minimum of 1)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(f"node:{node_id}", mapping={
                "node_id": node_id, "url": url, "cpu_milli": int(round(cpu_capacity * 1000)), "memory_mb": memory_mb,
                "max_sandboxes": max_sandboxes, "heartbeat_at": repr(now), "backends": ",".join(backends),
                "accelerator": accelerator, "vm_memory_overhead_mb": vm_memory_overhead_mb,
            })
            measured = json.dumps(memory, sort_keys=True) if memory is not None else None
            ready = json.dumps(warm, sort_keys=True) if warm else None
            for field, value in (("pids", pids), ("disk_mb", disk_mb), ("memory", measured), ("warm", ready)):
                if value is not None:
                    pipe.hset(f"node:{node_id}", field, value)
                else:
                    pipe.hdel(f"node:{node_id}", field)
            pipe.zadd("nodes", {node_id: now})
            pipe.delete(f"node:{node_id}:lost")  # back: what it still runs may be registered again
            await pipe.execute()

    async def report_layers(self, node_id: str, held: dict[str, int], ttl_s: float) -> None:
        """The layers a node holds (digest -> bytes held), replaced whole; gone with the node."""
        key = f"node:{node_id}:layers"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            if held:
                pipe.hset(key, mapping=cast(RedisMapping, held))
                pipe.expire(key, int(ttl_s))
            await pipe.execute()

    async def held_layers(self, node_ids: list[str], digests: list[str]) -> dict[str, dict[str, int]]:
        """For each node, the bytes it holds of each of ``digests`` (absent: none)."""
        if not node_ids or not digests:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for node_id in node_ids:
                pipe.hmget(f"node:{node_id}:layers", digests)
            rows = await pipe.execute()
        return {node_id: {d: int(v) for d, v in zip(digests, row, strict=True) if v is not None}
                for node_id, row in zip(node_ids, rows, strict=True)}

    async def _nodes(self, node_ids: list[str]) -> list[NodeInfo]:
        if not node_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for node_id in node_ids:
                pipe.hgetall(f"node:{node_id}")
                pipe.hgetall(f"node:{node_id}:used")
            rows = await pipe.execute()
        return _node_infos(rows)

    async def placement_view(self, sandbox_id: str, timeout_s: float) -> "PlacementView":
        """The record, the sandbox's reservation (its node) and the live nodes, in one round trip."""
        rows = await self._placement_view(keys=[_sandbox_key(sandbox_id), f"resv:{sandbox_id}"],
                                          args=[time.time() - timeout_s])
        record, held = rows[0], rows[1]
        return PlacementView(SandboxRecord.from_hash(_pairs(record)) if record else None,
                             held.split("|", 1)[0] if held else None,
                             _node_infos([_pairs(row) for row in rows[2:]]))

    async def live_nodes(self, timeout_s: float) -> list[NodeInfo]:
        ids = await self.redis.zrangebyscore("nodes", time.time() - timeout_s, "+inf")
        return await self._nodes(cast(list[str], ids))

    async def get_node(self, node_id: str) -> NodeInfo | None:
        nodes = await self._nodes([node_id])
        return nodes[0] if nodes else None

    async def lost_nodes(self, timeout_s: float) -> list[str]:
        return [node_id for node_id, _ in await self.stale_nodes(timeout_s)]

    async def stale_nodes(self, timeout_s: float) -> list[tuple[str, float]]:
        """Nodes whose score is older than ``timeout_s``, with it (when they last showed life)."""
        stale = await self.redis.zrangebyscore("nodes", "-inf", time.time() - timeout_s, withscores=True)
        return [(node_id, float(score)) for node_id, score in cast(list[tuple[str, float]], stale)]

    async def node_sandboxes(self, node_id: str) -> set[str]:
        return cast(set[str], await self.redis.smembers(f"sb:node:{node_id}"))

    async def forget_node(self, node_id: str) -> None:
        """The reaper gave the node up (its sandboxes failed as node_lost). A tombstone stays
        until its next heartbeat, so that an agent coming back stops what it still runs
        instead of registering it again (restore_sandbox answers ``lost``)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(f"node:{node_id}", f"node:{node_id}:used", f"sb:node:{node_id}")
            pipe.zrem("nodes", node_id)
            pipe.set(f"node:{node_id}:lost", repr(time.time()))
            await pipe.execute()

    async def reserve(self, node_id: str, sandbox_id: str, spec: SandboxSpec, timeout_s: float, *,
                      memory_mb: int | None = None) -> str | None:
        """Atomically take capacity on a node; idempotent per sandbox. Returns the node holding it.
        What it takes is the spec's requests: ``memory_mb`` is what the sandbox costs the host
        (NodeInfo.reserved_memory_mb), by default its memory request; its pids and disk are its
        requests too (each counted where the node advertises it)."""
        requests = spec.reservation
        value = await self._reserve(
            keys=[f"node:{node_id}", f"node:{node_id}:used", f"resv:{sandbox_id}", f"sb:node:{node_id}"],
            args=[cpu_milli(requests.cpu), requests.memory_mb if memory_mb is None else memory_mb, sandbox_id, node_id,
                  repr(time.time()), timeout_s, requests.pids, requests.disk_mb],
        )
        return value.split("|", 1)[0] if value else None

    async def release(self, sandbox_id: str) -> bool:
        return bool(await self._release(keys=[f"resv:{sandbox_id}"], args=[sandbox_id]))

    async def restore_sandbox(self, record: SandboxRecord, *, memory_mb: int | None = None) -> RestoreOutcome:
        """A node-agent registers a sandbox it runs (``record``: node_id, state, spec, tenant...
        from its own disk) after Redis lost it; idempotent. Writes the record if there is none,
        takes its reservation (the same one ``reserve`` makes, ``memory_mb`` by default the
        spec's; never refused: it runs already) and puts it in its tenant's, node's and job's
        sets. An existing record is never overwritten, only told where a not yet running one runs.
        A record written again is counted in its tenant's quota ledger (quota_ledger.py)."""
        assert record.node_id, "a restored sandbox runs on a node"
        spec, node = record.spec, record.node_id
        requests = spec.reservation
        # The node's reservation counts requests; the tenant's quota ledger counts limits.
        argv: list[str | int] = [record.id, node, cpu_milli(requests.cpu),
                                 requests.memory_mb if memory_mb is None else memory_mb, requests.pids,
                                 requests.disk_mb, cpu_milli(spec.cpu), spec.memory_mb, spec.disk_mb, repr(time.time())]
        for key, value in record.to_hash().items():
            argv += [key, value]
        outcome, _ = await self._restore(keys=[_sandbox_key(record.id), f"node:{node}:used", f"resv:{record.id}",
                                               f"sb:node:{node}", f"node:{node}:lost", *ledger_keys(record.tenant)],
                                         args=argv)
        return RestoreOutcome(outcome)

    async def reservation_node(self, sandbox_id: str) -> str | None:
        value = await self.redis.get(f"resv:{sandbox_id}")
        return cast(str, value).split("|", 1)[0] if value else None

    # --- platform-wide counts (for /metrics) ------------------------------------------

    async def count_sandboxes(self, scan_count: int = 1000) -> dict[tuple[str, str], int]:
        """Sandbox records in Redis by (state, backend): live ones, and ended ones for
        ``TERMINAL_TTL_S``. A SCAN over the keyspace, and per batch one Lua call that counts in
        Redis (the specs never cross the wire): 10,000 records in ~0.15 s on a loaded 2-core host
        (reading the specs into Python took 2.4 s), each call holding Redis for a batch only."""
        counts: dict[tuple[str, str], int] = {}
        async for batch in self._sandbox_key_batches(scan_count):
            flat = await self._count(keys=batch)
            for key, n in zip(flat[::2], flat[1::2], strict=True):
                state, _, backend = key.partition("|")
                counts[(state, backend)] = counts.get((state, backend), 0) + int(n)
        return counts

    async def _sandbox_key_batches(self, scan_count: int):
        cursor = 0
        while True:
            cursor, keys = await self.redis.scan(cursor, match="sb:*", count=scan_count)
            # sb:<id> hashes only: sb:tenant:<t> and sb:node:<n> are index sets
            batch = [k for k in keys if ":" not in k[3:]]
            if batch:
                yield batch
            if cursor == 0:
                return
