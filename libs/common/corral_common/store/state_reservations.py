"""Capacity reservations: a sandbox's share of its node (``resv:<id>`` and the node's used
counters), taken and given back atomically; a sandbox a node-agent runs registered again after
Redis lost it; and what one placement attempt reads, in one round trip."""

import time
from enum import StrEnum
from typing import NamedTuple, cast

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from corral_common.contracts.sandboxes import (
    SandboxSpec,
)
from corral_common.store.quota_ledger import COUNT_ENTRY_LUA, ledger_keys
from corral_common.store.state_nodes import NodeInfo, cpu_milli, node_infos, pairs
from corral_common.store.state_records import SandboxRecord, sandbox_key

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
-- pids and disk: counted only against nodes that advertise them (older agents did not)
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
-- reservations made before pids (and then disk) were counted have fewer fields
-- compat(53beb59 pids, 653b94c disk; 2026-12-01): delete the optional fields 7 days (the longest timeout_s)
-- after every scheduler runs 653b94c or later (a reservation lives as long as its sandbox).
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


class PlacementView(NamedTuple):
    record: SandboxRecord | None
    held: str | None  # the node holding its reservation
    nodes: list[NodeInfo]  # live ones


class Reservations:
    """The reservations part of ``StateStore`` (state_state.py)."""

    def __init__(self, redis: aioredis.Redis):
        self.redis = redis
        self._reserve: AsyncScript = redis.register_script(_RESERVE)
        self._release: AsyncScript = redis.register_script(_RELEASE)
        self._restore: AsyncScript = redis.register_script(_RESTORE)
        self._placement_view: AsyncScript = redis.register_script(_PLACEMENT_VIEW)

    async def placement_view(self, sandbox_id: str, timeout_s: float) -> PlacementView:
        """The record, the sandbox's reservation (its node) and the live nodes, in one round trip."""
        rows = await self._placement_view(keys=[sandbox_key(sandbox_id), f"resv:{sandbox_id}"],
                                          args=[time.time() - timeout_s])
        record, held = rows[0], rows[1]
        return PlacementView(SandboxRecord.from_hash(pairs(record)) if record else None,
                             held.split("|", 1)[0] if held else None,
                             node_infos([pairs(row) for row in rows[2:]]))

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
        outcome, _ = await self._restore(keys=[sandbox_key(record.id), f"node:{node}:used", f"resv:{record.id}",
                                               f"sb:node:{node}", f"node:{node}:lost", *ledger_keys(record.tenant)],
                                         args=argv)
        return RestoreOutcome(outcome)

    async def reservation_node(self, sandbox_id: str) -> str | None:
        value = await self.redis.get(f"resv:{sandbox_id}")
        return cast(str, value).split("|", 1)[0] if value else None
