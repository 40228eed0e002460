"""The balloon loop: for every VM of the node, read its balloon through the node-agent, set a
target (policy.py). The node-agent is the one QMP client of each VM; this service never opens
a monitor (docs/memory.md)."""

import asyncio
import time

import httpx

from corral_common.contracts.memory import BalloonState
from corral_common.internal import INTERNAL_TOKEN_HEADER
from corral_common.logging import get_logger
from corral_memory_manager import metrics
from corral_memory_manager.balloons.ksm import KsmPolicy
from corral_memory_manager.balloons.policy import BalloonMemory, BalloonPolicy, decide

log = get_logger(__name__)

_NOT_A_VM_RECHECK_S = 300.0


class BalloonService:
    def __init__(self, node_id: str, node_agent_url: str, internal_token: str, policy: BalloonPolicy,
                 sandbox_ids, transport: httpx.AsyncBaseTransport | None = None, ksm: KsmPolicy | None = None) -> None:
        self.node_id, self.policy, self.sandbox_ids, self.ksm = node_id, policy, sandbox_ids, ksm
        self.client = httpx.AsyncClient(base_url=node_agent_url.rstrip("/"), timeout=5.0, transport=transport,
                                        headers={INTERNAL_TOKEN_HEADER: internal_token} if internal_token else {})
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
            except httpx.HTTPError as exc:
                log.warning("balloon.unreachable", sandbox_id=sandbox_id, error=str(exc))
        for gone in [s for s in self.memory if s not in ids]:
            self.memory.pop(gone, None)
            self.last.pop(gone, None)
            try:
                metrics.BALLOON_ACTUAL.remove(self.node_id, gone)
            except KeyError:
                pass
        if self.ksm is not None:
            environments = [entry["state"]["environment"] for entry in self.last.values()]
            await asyncio.to_thread(self.ksm.apply, environments)

    async def _one(self, sandbox_id: str) -> None:
        resp = await self.client.get(f"/v1/sandboxes/{sandbox_id}/balloon")
        if 400 <= resp.status_code < 500:  # a container (no balloon), or gone
            self.not_vms[sandbox_id] = time.monotonic()
            return
        resp.raise_for_status()
        state = BalloonState.model_validate(resp.json())
        decision = decide(state, self.memory.get(sandbox_id, BalloonMemory()), self.policy, time.time())
        self.memory[sandbox_id] = decision.memory
        if decision.target_mb is not None:
            put = await self.client.put(f"/v1/sandboxes/{sandbox_id}/balloon",
                                        json={"target_mb": max(16, int(decision.target_mb))})
            put.raise_for_status()
            metrics.BALLOON_SETS.labels(self.node_id, "deflate" if decision.target_mb >= state.actual_mb
                                        else "inflate").inc()
            log.info("balloon.set", sandbox_id=sandbox_id, actual_mb=round(state.actual_mb),
                     target_mb=int(decision.target_mb), why=decision.why)
        metrics.BALLOON_ACTUAL.labels(self.node_id, sandbox_id).set(state.actual_mb * (1 << 20))
        self.last[sandbox_id] = {"state": state.model_dump(), "target_mb": decision.target_mb, "why": decision.why}

    async def run_forever(self, interval_s: float) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("balloon.pass_failed", node_id=self.node_id)
            await asyncio.sleep(interval_s)
