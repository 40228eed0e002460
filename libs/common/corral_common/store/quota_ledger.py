"""Where a tenant's quota ledger lives in Redis, and the one Lua function that counts an entry
in it. The api keeps the ledger (corral_api/admin/quotas.py: admission, release, reconcile);
a node-agent that registers a sandbox again after Redis lost its data (StateStore.restore_sandbox)
counts it too, or a tenant could run past its quotas by as much as Redis forgot.
"""

LEDGER_FIELDS = ("sandboxes", "cpu_milli", "memory_mb", "disk_mb")


def ledger_keys(tenant: str) -> list[str]:
    """The tenant's used counters (a hash of LEDGER_FIELDS) and its entries (entry id → n|cpu|mem|disk|at)."""
    return [f"quota:used:{tenant}", f"quota:entries:{tenant}"]


# count_entry(used, entries, entry, n, cpu_milli, memory_mb, disk_mb, at): count n sandboxes of
# that size each under ``entry`` (no limit checked; the caller checked what it must).
COUNT_ENTRY_LUA = """
local function count_entry(used, entries, entry, n, cpu, mem, disk, at)
  n, cpu, mem, disk = tonumber(n), tonumber(cpu), tonumber(mem), tonumber(disk)
  redis.call('HINCRBY', used, 'sandboxes', n)
  redis.call('HINCRBY', used, 'cpu_milli', n * cpu)
  redis.call('HINCRBY', used, 'memory_mb', n * mem)
  redis.call('HINCRBY', used, 'disk_mb', n * disk)
  redis.call('HSET', entries, entry, n .. '|' .. cpu .. '|' .. mem .. '|' .. disk .. '|' .. at)
end
"""
