"""Prometheus metrics of the warm pools (served on the node-agent's /metrics)."""

from prometheus_client import Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10, 30)

POOL_SIZE = Gauge("corral_fncall_pool_size", "Workers in the warm pool", ["node", "runtime"])
POOL_BUSY = Gauge("corral_fncall_pool_busy", "Workers running a call", ["node", "runtime"])
POOL_WARM = Gauge("corral_fncall_pool_warm", "Python workers whose zygote is running", ["node", "runtime"])
QUEUE_DEPTH = Gauge("corral_fncall_queue_depth", "Calls waiting in the runtime's work queue", ["runtime"])
CALLS = Counter("corral_fncall_calls_total", "Calls executed by this node, by overall verdict",
                ["node", "runtime", "verdict"])
CALLS_PER_SECOND = Gauge("corral_fncall_calls_per_second", "Calls finished per second over the last 10 s",
                         ["node", "runtime"])
CALL_SECONDS = Histogram("corral_fncall_call_seconds", "Time a worker spent on a call (compile + all cases)",
                         ["node", "runtime"], buckets=LATENCY_BUCKETS)
