"""The node-agent's numbers on its /metrics: its sandboxes by state and backend, how long they
take to start and stop, the time from the api's create to running, and the lazy loader's chunk
cache (the fncall pools' are corral_node_agent.fncall.metrics)."""

from collections.abc import Callable

from prometheus_client import Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from corral_node_agent.layers.lazy.chunks import ChunkStats

# A container starts in ~100 ms, a TCG VM in minutes.
LIFECYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

SANDBOXES = Gauge("corral_node_agent_sandboxes", "Sandboxes on this node by state and backend, read at scrape",
                  ["node", "state", "backend"])
CREATE_SECONDS = Histogram("corral_node_agent_sandbox_create_seconds",
                           "Time the node took to start a sandbox (layers, disk, network, runtime)",
                           ["node", "backend", "outcome"], buckets=LIFECYCLE_BUCKETS)
STOP_SECONDS = Histogram("corral_node_agent_sandbox_stop_seconds", "Time the node took to stop and remove a sandbox",
                         ["node", "backend"], buckets=LIFECYCLE_BUCKETS)
TIME_TO_RUNNING = Histogram("corral_sandbox_create_to_running_seconds",
                            "From the api's create (the record's created_at) to running: queueing, placement and "
                            "start; observed once per sandbox by the node that runs it", ["backend"],
                            buckets=LIFECYCLE_BUCKETS + (1200, 1800))
# Set by the liveness pulse (events/pulse.py), read at scrape.
EVENT_LOOP_LAG = Gauge("corral_node_agent_event_loop_lag_seconds",
                       "The worst lag of the agent's event loop over the last minute (how late its periodic tick "
                       "came, an ongoing stall included): a loop late by more than the heartbeat timeout made the "
                       "full heartbeat late, which the liveness pulse covers", ["node"])

WARM_POOL_READY = Gauge("corral_node_agent_warm_pool_ready",
                        "Containers started ahead and not claimed yet (sandboxes/warm_pool.py), read at scrape", ["node"])
WARM_POOL_CREATES = Gauge("corral_node_agent_warm_pool_creates",
                          "Creates of a pooled shape since the agent started, by whether one was ready (hit) or "
                          "not (miss), read at scrape", ["node", "outcome"])

STATES = ("starting", "running", "paused", "failed")


class NodeGauges:
    """Scrape-time collector of the node's sandboxes (``install_metrics(collectors=...)``)."""

    def __init__(self, node: str, manager):
        self.node, self.manager = node, manager

    async def __call__(self) -> None:
        counts = {(state, kind): 0 for state in STATES for kind in self.manager.kinds()}  # every series, even at 0
        for key in self.manager.inventory():
            counts[key] = counts.get(key, 0) + 1
        SANDBOXES.clear()
        for (state, kind), n in counts.items():
            SANDBOXES.labels(node=self.node, state=state, backend=kind).set(n)
        pool = self.manager.pool
        if pool is not None:
            WARM_POOL_READY.labels(node=self.node).set(pool.ready_count())
            WARM_POOL_CREATES.labels(node=self.node, outcome="hit").set(pool.hits)
            WARM_POOL_CREATES.labels(node=self.node, outcome="miss").set(pool.misses)


class ChunkCacheCollector(Collector):
    """The lazy-layer server's ChunkStats as counters, asked for at scrape (``stats()``: a
    local request with a short timeout; the last known counters when it does not answer)."""

    def __init__(self):
        self._caches: dict[str, Callable[[], ChunkStats]] = {}

    def watch(self, node: str, stats: Callable[[], ChunkStats]) -> None:
        self._caches[node] = stats

    def collect(self):
        requests = CounterMetricFamily("corral_node_chunk_cache_requests", "Chunk lookups by lazily loaded layers",
                                       labels=["node"])
        hits = CounterMetricFamily("corral_node_chunk_cache_hits", "Chunk lookups served from the node's cache",
                                   labels=["node", "tier"])
        misses = CounterMetricFamily("corral_node_chunk_cache_misses",
                                     "Chunks fetched from the image-service (after merging concurrent lookups)",
                                     labels=["node"])
        fetched = CounterMetricFamily("corral_node_chunk_fetched_bytes", "Chunk bytes fetched from the image-service",
                                      labels=["node"])
        failures = CounterMetricFamily("corral_node_chunk_failures", "Chunk lookups that ended in an I/O error",
                                       labels=["node"])
        ratio = GaugeMetricFamily("corral_node_chunk_cache_hit_ratio", "Hits / lookups since the agent started",
                                  labels=["node"])
        for node, read in list(self._caches.items()):
            s = read()
            requests.add_metric([node], s.requests)
            hits.add_metric([node, "memory"], s.mem_hits)
            hits.add_metric([node, "disk"], s.disk_hits)
            misses.add_metric([node], s.fetched)
            fetched.add_metric([node], s.fetched_bytes)
            failures.add_metric([node], s.failures)
            ratio.add_metric([node], s.hit_rate)
        yield from (requests, hits, misses, fetched, failures, ratio)


CHUNK_CACHES = ChunkCacheCollector()
REGISTRY.register(CHUNK_CACHES)
