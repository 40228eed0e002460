"""The node is the truth for what runs on it: its sandboxes are registered again in Redis
when Redis lost them (restarted without its data, or flushed).

Every heartbeat first compares the sandboxes that run here with the node's set in Redis
(``sb:node:<node>``, which holds every sandbox placed here until it ends). Normally nothing
is missing and nothing more is done. A sandbox that is missing is registered again from its
owner record on this node's disk (owners.py): its record (spec, tenant, state, timestamps,
labels), its reservation and its sets, all through ``StateStore.restore_sandbox``, which is
idempotent and never overwrites a record that exists. Redis may answer that the sandbox
ended meanwhile (deleted, or failed as node_lost when this node was given up), or runs on
another node: then this copy is stopped. A sandbox whose owner nobody knows (no record on
this node nor in Redis) is stopped and reported: ``sandbox.orphan_stopped`` in the log and
``corral_node_orphans_stopped_total``.
"""

import asyncio
import time
from collections import defaultdict

from prometheus_client import Counter

from corral_common.contracts.sandboxes import TERMINAL_STATES, SandboxState, reserved_memory_mb
from corral_common.logging import get_logger
from corral_common.store.state import StateStore
from corral_common.store.state_reservations import RestoreOutcome
from corral_node_agent.sandboxes.owners import OwnerRecord
from corral_node_agent.sandboxes.service import SandboxManager

log = get_logger(__name__)

REGISTERED = Counter("corral_node_sandboxes_registered_total",
                     "Sandboxes this node registered again in Redis, by what Redis answered", ["node", "outcome"])
ORPHANS = Counter("corral_node_orphans_stopped_total",
                  "Sandboxes stopped because neither Redis nor this node knew their owner", ["node"])

# What Redis answers for a sandbox this node must stop.
_STOP = frozenset({RestoreOutcome.ended, RestoreOutcome.elsewhere, RestoreOutcome.lost})


class NodeRegistration:
    def __init__(self, node_id: str, store: StateStore, manager: SandboxManager,
                 locks: defaultdict[str, asyncio.Lock]):
        self.node_id = node_id
        self.store = store
        self.manager = manager
        self.locks = locks  # NodeEvents': one lifecycle operation per sandbox at a time

    async def sync(self) -> list[str]:
        """Register again every running sandbox Redis does not count on this node; returns them."""
        live = self.manager.live_ids()
        if not live:
            return []
        known = await self.store.node_sandboxes(self.node_id)
        missing = [sid for sid in live if sid not in known]
        if missing:
            log.warning("node.sandboxes_unregistered", node_id=self.node_id, missing=len(missing), live=len(live))
        for sandbox_id in missing:
            async with self.locks[sandbox_id]:
                if not self.manager.is_live(sandbox_id):
                    continue  # ended meanwhile
                try:
                    await self.restore(sandbox_id)
                except Exception:
                    log.exception("sandbox.register_failed", sandbox_id=sandbox_id)
        return missing

    async def restore(self, sandbox_id: str, *, live: bool = True) -> RestoreOutcome | None:
        """Register one sandbox that runs here (the caller holds its lock). None: it had no
        owner anywhere and was stopped. ``live=False``: it has just ended on its own, and is
        registered (as running) only so that its end can be recorded as usual."""
        owners = self.manager.owners
        owner = owners.get(sandbox_id) if owners is not None else None
        if owner is None:
            existing = await self.store.get_sandbox(sandbox_id)
            if existing is None:
                if live:
                    await self._stop_orphan(sandbox_id)
                return None
            # Started by an agent that kept no owner records: Redis still knows; keep it here too.
            owner = OwnerRecord.of(existing, self.manager.spec(sandbox_id) if live else existing.spec, time.time())
            if owners is not None and existing.node_id == self.node_id and existing.state not in TERMINAL_STATES:
                owners.write(owner)
        state = SandboxState.paused if live and self.manager.is_paused(sandbox_id) else SandboxState.running
        record = owner.record(self.node_id, state, self.manager.runtime(sandbox_id), time.time())
        spec = record.spec
        outcome = await self.store.restore_sandbox(
            record, memory_mb=reserved_memory_mb(spec.backend, spec.reservation.memory_mb,
                                               self.manager.vm_memory_overhead_mb))
        REGISTERED.labels(self.node_id, outcome.value).inc()
        if outcome in _STOP:
            log.warning("sandbox.stopped_on_register", sandbox_id=sandbox_id, outcome=outcome.value)
            if live:
                await self.manager.delete(sandbox_id)
        else:
            log.info("sandbox.registered", sandbox_id=sandbox_id, outcome=outcome.value, state=state.value,
                     tenant=owner.tenant)
        return outcome

    async def _stop_orphan(self, sandbox_id: str) -> None:
        log.warning("sandbox.orphan_stopped", sandbox_id=sandbox_id, node_id=self.node_id,
                    why="neither Redis nor this node has a record of its owner")
        ORPHANS.labels(self.node_id).inc()
        await self.manager.delete(sandbox_id)
