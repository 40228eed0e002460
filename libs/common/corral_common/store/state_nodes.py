"""Nodes: heartbeats (capacity, kinds, measured memory, warm pool), the layers each holds, which
are live, lost or stale, and giving one up."""

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import redis.asyncio as aioredis

from corral_common.contracts.sandboxes import (
    DEFAULT_VM_MEMORY_OVERHEAD_MB,
    SandboxSpec,
    reserved_memory_mb,
)

# The store's client decodes every reply (redis_client.connect, decode_responses=True), but
# redis-py's types do not follow that setting: replies are cast to str where they are read, and
# mappings written are typed as redis-py takes them (Mapping's key type is invariant).
RedisMapping = Mapping[Any, Any]

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
    backends: tuple[str, ...] = ("container",)
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


def pairs(flat: list) -> dict:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def node_infos(rows: list[dict]) -> list[NodeInfo]:
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
            backends=tuple(info["backends"].split(",")) if info.get("backends") else ("container",),
            accelerator=info.get("accelerator", ""),
            vm_memory_overhead_mb=int(info.get("vm_memory_overhead_mb") or DEFAULT_VM_MEMORY_OVERHEAD_MB),
            pids=int(info["pids"]) if info.get("pids") else None, used_pids=int(used.get("pids", 0)),
            disk_mb=int(info["disk_mb"]) if info.get("disk_mb") else None,
            used_disk_mb=int(used.get("disk_mb", 0)),
            memory=json.loads(info["memory"]) if info.get("memory") else None,
            warm=json.loads(info["warm"]) if info.get("warm") else {},
        ))
    return nodes


class NodeDirectory:
    """The nodes part of ``StateStore`` (state_state.py)."""

    def __init__(self, redis: aioredis.Redis):
        self.redis = redis

    async def heartbeat(self, node_id: str, url: str, cpu_capacity: float, memory_mb: int, max_sandboxes: int, *,
                        backends: tuple[str, ...] | list[str] = ("container",), accelerator: str = "",
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
        return node_infos(rows)

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
