"""Why no worker serves a runtime: asked of the live nodes' fncall pools (node-agent
``GET /v1/fncall/pools``) on the 503 path only, so that a call made while the pools warm up
(a fresh node mounting the judge tree, a pool starting its workers) says what it waits for
instead of a bare "unavailable". One question at a time, its answer kept for a moment: a burst
of calls during a warm-up costs the nodes one request each."""

import asyncio
import time
from dataclasses import dataclass

from corral_common.contracts.node_client import NodeAgentClient
from corral_common.store.state import StateStore
from corral_common.store.state_nodes import NodeInfo
from corral_common.web.errors import CorralError

ASK_TIMEOUT_S = 2.0
KEEP_S = 1.0
READY = "ready"


@dataclass(frozen=True)
class NodePools:
    node_id: str
    status: str  # the node's fncall status: "ready", "starting", "waiting for environment ...", ...
    runtimes: frozenset[str]  # runtimes whose pool runs there


class FncallWarmup:
    def __init__(self, store: StateStore, nodes: NodeAgentClient, heartbeat_timeout_s: float):
        self.store = store
        self.nodes = nodes
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self._asking: asyncio.Future[list[NodePools]] | None = None
        self._answer: tuple[float, list[NodePools]] = (0.0, [])

    async def _ask(self, node: NodeInfo) -> NodePools:
        try:
            status = await asyncio.wait_for(self.nodes.fncall_pools(node.url), ASK_TIMEOUT_S)
            return NodePools(node.node_id, status.status, frozenset(pool.runtime for pool in status.pools))
        except (TimeoutError, CorralError, ValueError) as exc:  # ValueError: a malformed answer
            return NodePools(node.node_id, f"did not answer ({type(exc).__name__})", frozenset())

    async def _ask_all(self) -> list[NodePools]:
        live = await self.store.live_nodes(self.heartbeat_timeout_s)
        return list(await asyncio.gather(*(self._ask(node) for node in live)))

    async def pools(self) -> list[NodePools]:
        at, answer = self._answer
        if time.monotonic() - at < KEEP_S:
            return answer
        if self._asking is None:
            self._asking = asyncio.ensure_future(self._ask_all())

            def keep(done: asyncio.Future) -> None:
                self._asking = None
                if not done.cancelled() and done.exception() is None:
                    self._answer = (time.monotonic(), done.result())

            self._asking.add_done_callback(keep)
        return await asyncio.shield(self._asking)

    async def why_unserved(self, runtime: str) -> tuple[bool, str]:
        """(warming up, what the nodes say) for a runtime no worker consumes: warming up when
        some live node's pools are not ready yet (they will serve it soon)."""
        pools = await self.pools()
        if not pools:
            return False, "no node is live"
        warming = [p for p in pools if p.status != READY]
        said = [f"{p.node_id}: {p.status}" for p in warming]
        said += [f"{p.node_id}: ready without a {runtime} pool (its runtime tree lacks it)"
                 for p in pools if p.status == READY and runtime not in p.runtimes]
        return bool(warming), "; ".join(said)
