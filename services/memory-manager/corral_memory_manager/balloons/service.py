"""The balloon loop: for every VM of the node, read its balloon through the node-agent, set a
target (policy.py). The node-agent is the one QMP client of each VM; this service never opens
a monitor (docs/memory.md)."""

import asyncio
import time
from contextlib import nullcontext

import httpx

from corral_common.contracts.node import BalloonState, BalloonTarget, ExecRequest
from corral_common.contracts.node_client import NodeAgentClient, NodeAgentUnreachable
from corral_common.logging import get_logger
from corral_common.web.errors import CorralError
from corral_memory_manager import metrics
from corral_memory_manager.balloons.ksm import KsmPolicy
from corral_memory_manager.balloons.policy import BalloonMemory, BalloonPolicy, decide, guest_cache_reclaim_due

log = get_logger(__name__)

_NOT_A_VM_RECHECK_S = 300.0
# Run in the guest as root, marked housekeeping (not use of the sandbox).
_DROP_CACHES = ExecRequest(cmd="sync; echo 1 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory",
                           user="root", timeout_s=30)


class BalloonService:
    def __init__(self, node_id: str, node_agent_url: str, internal_token: str, policy: BalloonPolicy,
                 sandbox_ids, transport: httpx.AsyncBaseTransport | None = None, ksm: KsmPolicy | None = None,
                 idle_seconds=None, idle_after_s: float | None = None, guest_cache_mb: float | None = None,
                 housekeeping=None) -> None:
        """``idle_seconds(sandbox_id)``: how long it has looked idle (the reclaim loop's watch,
        reclaim/idleness.py); a VM idle for ``idle_after_s`` has its balloon inflated without
        waiting, and, with ``guest_cache_mb``, its guest's page cache above that dropped (None:
        off). ``housekeeping(sandbox_id)``: a context the cache drop runs in, so its cpu is not
        taken for the guest waking up."""
        self.node_id, self.policy, self.sandbox_ids, self.ksm = node_id, policy, sandbox_ids, ksm
        self.idle_seconds, self.idle_after_s, self.guest_cache_mb = idle_seconds, idle_after_s, guest_cache_mb
        self.housekeeping = housekeeping
        self._guest_reclaimed_at: dict[str, float] = {}
        self.node_agent_url = node_agent_url
        self.client = NodeAgentClient(internal_token, timeout_s=5.0, transport=transport)
        self.memory: dict[str, BalloonMemory] = {}
        self.not_vms: dict[str, float] = {}  # sandbox -> when it said it has no balloon
        self.last: dict[str, dict] = {}  # sandbox -> last state and decision (GET /v1/balloons)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def run_once(self) -> None:
        now = time.monotonic()
        ids = await asyncio.to_thread(self.sandbox_ids)
        for sandbox_id in ids:
            if now - self.not_vms.get(sandbox_id, -_NOT_A_VM_RECHECK_S) < _NOT_A_VM_RECHECK_S:
                continue
            try:
                await self._one(sandbox_id)
            except (CorralError, httpx.HTTPError) as exc:  # the node's error, or no answer
                log.warning("balloon.unreachable", sandbox_id=sandbox_id, error=str(exc))
        for gone in [s for s in self.memory if s not in ids]:
            self.memory.pop(gone, None)
            self.last.pop(gone, None)
            self._guest_reclaimed_at.pop(gone, None)
            try:
                metrics.BALLOON_ACTUAL.remove(self.node_id, gone)
            except KeyError:
                pass
        if self.ksm is not None:
            environments = [entry["state"]["environment"] for entry in self.last.values()]
            await asyncio.to_thread(self.ksm.apply, environments)

    async def _one(self, sandbox_id: str) -> None:
        try:
            state = await self.client.balloon(self.node_agent_url, sandbox_id)
        except CorralError as exc:
            if 400 <= exc.status_code < 500:  # a container (no balloon), or gone
                self.not_vms[sandbox_id] = time.monotonic()
                return
            raise
        decision = decide(state, self.memory.get(sandbox_id, BalloonMemory()), self.policy, time.time(),
                          idle=self._idle_for(sandbox_id) is not None)
        self.memory[sandbox_id] = decision.memory
        if decision.target_mb is not None:
            await self.client.set_balloon(self.node_agent_url, sandbox_id,
                                          BalloonTarget(target_mb=max(16, int(decision.target_mb))))
            metrics.BALLOON_SETS.labels(self.node_id, "deflate" if decision.target_mb >= state.actual_mb
                                        else "inflate").inc()
            log.info("balloon.set", sandbox_id=sandbox_id, actual_mb=round(state.actual_mb),
                     target_mb=int(decision.target_mb), why=decision.why)
        metrics.BALLOON_ACTUAL.labels(self.node_id, sandbox_id).set(state.actual_mb * (1 << 20))
        await self._guest_cache_reclaim(sandbox_id, state)
        self.last[sandbox_id] = {"state": state.model_dump(), "target_mb": decision.target_mb, "why": decision.why}

    def _idle_for(self, sandbox_id: str) -> float | None:
        """Seconds the VM has been idle, if past ``idle_after_s``; None: busy, or not known."""
        if self.idle_seconds is None or self.idle_after_s is None:
            return None
        idle = self.idle_seconds(sandbox_id)
        return idle if idle >= self.idle_after_s else None

    async def _guest_cache_reclaim(self, sandbox_id: str, state: BalloonState) -> None:
        """Cold page cache inside an idle guest: dropped and compacted through the guest agent
        (the node-agent's exec route, as root, marked housekeeping: not use of the sandbox), at
        most once per idle stretch."""
        if self.guest_cache_mb is None:
            return
        idle = self._idle_for(sandbox_id)
        if idle is None:
            return
        last = self._guest_reclaimed_at.get(sandbox_id)
        if last is not None and time.monotonic() - last < idle:  # still the same idle stretch
            return
        if not guest_cache_reclaim_due(state, idle, self.idle_after_s, self.guest_cache_mb):
            return
        status = 200
        with self.housekeeping(sandbox_id) if self.housekeeping is not None else nullcontext():
            try:
                await self.client.exec(self.node_agent_url, sandbox_id, _DROP_CACHES, housekeeping=True)
            except NodeAgentUnreachable:
                raise  # not tried: again on the next pass
            except CorralError as exc:  # tried, and the node said no: not again this idle stretch
                status = exc.status_code
        self._guest_reclaimed_at[sandbox_id] = time.monotonic()
        metrics.GUEST_RECLAIMS.labels(self.node_id).inc()
        log.info("balloon.guest_cache_dropped", sandbox_id=sandbox_id, caches_mb=state.guest.disk_caches_mb,
                 status=status)

    async def run_forever(self, interval_s: float) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("balloon.pass_failed", node_id=self.node_id)
            await asyncio.sleep(interval_s)
