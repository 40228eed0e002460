"""The scheduler's numbers on its /metrics: placements, their latency and queue waits, what is
pending, and every live node's capacity and reservations (read from Redis at scrape)."""

import time

from prometheus_client import Counter, Gauge, Histogram

from corral_common.store.jobs import JobStore
from corral_common.store.state import StateStore

# A placement attempt is a few Redis round trips (ms); a wait for room can be minutes.
ATTEMPT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)

PLACEMENTS = Counter("corral_scheduler_placements_total",
                     "Placement decisions: placed on a node, or failed (unschedulable, required node gone)",
                     ["outcome", "backend"])
PLACEMENT_SECONDS = Histogram("corral_scheduler_placement_seconds",
                              "Time of one placement attempt (rank nodes, reserve, mark scheduled, send)",
                              ["outcome"], buckets=ATTEMPT_BUCKETS)
QUEUE_WAIT_SECONDS = Histogram("corral_scheduler_queue_wait_seconds",
                               "Time from the sandbox's record (the api's create) to its placement on a node",
                               ["via"], buckets=WAIT_BUCKETS)
JOB_ADMISSIONS = Counter("corral_scheduler_job_admissions_total", "Sandboxes of jobs admitted by fair share")
WAITING = Gauge("corral_scheduler_waiting_requests",
                "Single-sandbox requests this replica holds until a node has room")
PENDING = Gauge("corral_scheduler_pending_sandboxes",
                "Sandboxes not placed yet: held requests of this replica, and job sandboxes queued (platform-wide)",
                ["via"])
NODES_LIVE = Gauge("corral_nodes_live", "Nodes whose heartbeat is recent")
NODE_CPU_CAPACITY = Gauge("corral_node_cpu_capacity_cores", "CPU a node offers sandboxes", ["node"])
NODE_CPU_RESERVED = Gauge("corral_node_cpu_reserved_cores", "CPU reserved by sandboxes placed on a node", ["node"])
NODE_MEMORY_CAPACITY = Gauge("corral_node_memory_capacity_bytes", "Memory a node offers sandboxes", ["node"])
NODE_MEMORY_RESERVED = Gauge("corral_node_memory_reserved_bytes", "Memory reserved by a node's sandboxes", ["node"])
NODE_DISK_CAPACITY = Gauge("corral_node_disk_capacity_bytes", "Disk a node offers sandboxes' writable layers",
                           ["node"])
NODE_DISK_RESERVED = Gauge("corral_node_disk_reserved_bytes", "Disk reserved by a node's sandboxes", ["node"])
NODE_SANDBOXES_CAPACITY = Gauge("corral_node_sandboxes_capacity", "Sandboxes a node takes at most", ["node"])
NODE_SANDBOXES = Gauge("corral_node_sandboxes", "Sandboxes placed on a node (reservations held)", ["node"])
NODE_HEARTBEAT_AGE = Gauge("corral_node_heartbeat_age_seconds", "Seconds since a node's last heartbeat", ["node"])

_NODE_GAUGES = (NODE_CPU_CAPACITY, NODE_CPU_RESERVED, NODE_MEMORY_CAPACITY, NODE_MEMORY_RESERVED, NODE_DISK_CAPACITY,
                NODE_DISK_RESERVED, NODE_SANDBOXES_CAPACITY, NODE_SANDBOXES, NODE_HEARTBEAT_AGE)
MB = 1024 * 1024


def placed(event_created_at: float, via: str, backend: str, attempt_s: float) -> None:
    PLACEMENTS.labels(outcome="placed", backend=backend).inc()
    PLACEMENT_SECONDS.labels(outcome="placed").observe(attempt_s)
    QUEUE_WAIT_SECONDS.labels(via=via).observe(max(0.0, time.time() - event_created_at))


def failed(reason: str, backend: str, attempt_s: float) -> None:
    PLACEMENTS.labels(outcome=reason, backend=backend).inc()
    PLACEMENT_SECONDS.labels(outcome="failed").observe(attempt_s)


class SchedulerGauges:
    """Scrape-time collector: pending work and the live nodes (``install_metrics(collectors=...)``)."""

    def __init__(self, store: StateStore, jobs: JobStore, placer, heartbeat_timeout_s: float):
        self.store, self.jobs, self.placer = store, jobs, placer
        self.heartbeat_timeout_s = heartbeat_timeout_s

    async def __call__(self) -> None:
        nodes = await self.store.live_nodes(self.heartbeat_timeout_s)
        _, queued = await self.jobs.queue_depth()
        WAITING.set(self.placer.waiting)
        PENDING.labels(via="request").set(self.placer.waiting)
        PENDING.labels(via="job").set(queued)
        NODES_LIVE.set(len(nodes))
        now = time.time()
        for gauge in _NODE_GAUGES:  # a node gone since the last scrape must not linger
            gauge.clear()
        for n in nodes:
            NODE_CPU_CAPACITY.labels(node=n.node_id).set(n.cpu_milli / 1000)
            NODE_CPU_RESERVED.labels(node=n.node_id).set(n.used_cpu_milli / 1000)
            NODE_MEMORY_CAPACITY.labels(node=n.node_id).set(n.memory_mb * MB)
            NODE_MEMORY_RESERVED.labels(node=n.node_id).set(n.used_memory_mb * MB)
            if n.disk_mb is not None:
                NODE_DISK_CAPACITY.labels(node=n.node_id).set(n.disk_mb * MB)
            NODE_DISK_RESERVED.labels(node=n.node_id).set(n.used_disk_mb * MB)
            NODE_SANDBOXES_CAPACITY.labels(node=n.node_id).set(n.max_sandboxes)
            NODE_SANDBOXES.labels(node=n.node_id).set(n.used_sandboxes)
            NODE_HEARTBEAT_AGE.labels(node=n.node_id).set(max(0.0, now - n.heartbeat_at))
