"""Prometheus metrics of the api's fncall side (served on the api's /metrics)."""

from prometheus_client import Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 1.5, 2.5, 5, 10, 30,
                   60)

CALLS = Counter("corral_fncall_api_calls_total", "fncall calls answered by the api, by overall verdict",
                ["runtime", "verdict"])
LATENCY = Histogram("corral_fncall_api_latency_seconds", "End-to-end latency of a call in the api (queueing included)",
                    ["runtime"], buckets=LATENCY_BUCKETS)
QUEUE_DEPTH = Gauge("corral_fncall_api_queue_depth", "Calls waiting in the runtime's work queue (read at scrape)",
                    ["runtime"])
CALLS_PER_SECOND = Gauge("corral_fncall_api_calls_per_second", "Calls answered per second over the last 10 s",
                         ["runtime"])
IN_FLIGHT = Gauge("corral_fncall_api_in_flight", "Calls published and not answered yet", ["runtime"])
BATCHES = Counter("corral_fncall_api_batches_total", "Batches accepted")
