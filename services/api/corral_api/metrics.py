"""The api's platform-wide numbers on its /metrics (the fncall ones are corral_api.fncall.metrics).

Sandboxes per state and backend and the job queue are read from Redis at scrape time rather
than kept as gauges from events: every api replica would count every event, and a restarted
replica would start from zero; Redis is the one truth all replicas share."""

from prometheus_client import Counter, Gauge

from corral_common.contracts.sandboxes import SandboxState
from corral_common.store.jobs import JobStore
from corral_common.store.state import StateStore

SANDBOXES = Gauge("corral_sandboxes", "Sandbox records in Redis by state and requested backend (ended ones stay "
                  "an hour), read at scrape", ["state", "backend"])
SANDBOXES_REQUESTED = Counter("corral_api_sandboxes_requested_total",
                              "Sandboxes admitted by the api (records made and queued for the scheduler), "
                              "by requested backend and path (single create or job)", ["backend", "via"])
JOBS_ACTIVE = Gauge("corral_api_jobs_active", "Jobs with sandboxes not admitted yet, read at scrape")
JOB_QUEUE_DEPTH = Gauge("corral_api_job_queue_depth",
                        "Sandboxes of jobs waiting for admission by the scheduler, read at scrape")


class PlatformGauges:
    """Scrape-time collector of the platform-wide gauges (``install_metrics(collectors=...)``)."""

    def __init__(self, store: StateStore, jobs: JobStore):
        self.store, self.jobs = store, jobs

    async def __call__(self) -> None:
        counts = await self.store.count_sandboxes()
        active, queued = await self.jobs.queue_depth()
        SANDBOXES.clear()  # a (state, backend) pair that has no sandbox any more reads 0, not its last value
        for state in SandboxState:  # every state is a series from the first scrape on, even at 0
            SANDBOXES.labels(state=state.value, backend="container").set(0)
        for (state, backend), n in counts.items():
            SANDBOXES.labels(state=state, backend=backend).set(n)
        JOBS_ACTIVE.set(active)
        JOB_QUEUE_DEPTH.set(queued)
