"""Jobs: thousands of sandboxes of one spec in one call, admitted by fair share.

    with Corral() as corral:
        job = corral.jobs.create("busybox", count=1000, weight=2, timeout_s=30, labels={"run": "eval-7"})
        job.wait(progress=True)        # a progress bar on stderr
        print(job.counts)              # {"terminated": 1000}
        corral.sandboxes.list(labels={"job": job.id})
        job.delete()                   # terminates whatever still runs or waits

``AsyncCorral.jobs`` is the same with ``await`` (``Jobs``/``Job`` and ``AsyncJobs``/``AsyncJob``
are the operations of ``_JobsOps``/``_JobOps``, see ``corral._transport``).
"""

import time
from typing import Any, Self

from corral import _calls as calls
from corral._common import create_body
from corral._transport import Flavored, Op, Sleep, operation

_ENDED = ("terminated", "failed", "expired")


class _JobOps(Flavored):
    def __init__(self, corral: Any, info: dict[str, Any]):
        super().__init__(corral)
        self.info = info

    @property
    def id(self) -> str:
        return self.info["id"]

    @property
    def counts(self) -> dict[str, int]:
        return self.info.get("counts", {})

    @property
    def ended(self) -> int:
        return sum(self.counts.get(state, 0) for state in _ENDED)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, count={self.info['count']}, counts={self.counts})"

    def _refresh(self) -> Op[Self]:
        self.info = yield calls.get_job(self.id)
        return self

    refresh = operation(_refresh)

    @operation
    def delete(self) -> Op[Self]:
        self.info = yield calls.delete_job(self.id)
        return self

    @operation
    def wait(self, until: str = "ended", timeout: float = 3600.0, poll_s: float = 1.0,
             progress: bool = False) -> Op[Self]:
        """Until every sandbox ended (``until="ended"``) or at least ran (``"running"``);
        ``progress``: a bar on stderr (rich, as the CLI's)."""
        bar = _progress_bar() if progress else None
        task = bar.add_task(self.id, total=self.info["count"]) if bar is not None else None
        deadline = time.monotonic() + timeout
        try:
            while True:
                yield from self._refresh()
                done = self.ended if until == "ended" else self.ended + self.counts.get("running", 0) \
                    + self.counts.get("paused", 0) + self.counts.get("stopping", 0)
                if bar is not None:
                    bar.update(task, completed=done)  # type: ignore[arg-type]
                if done >= self.info["count"]:
                    return self
                if time.monotonic() > deadline:
                    raise TimeoutError(f"job {self.id}: {self.counts} after {timeout}s")
                yield Sleep(poll_s)
        finally:
            if bar is not None:
                bar.stop()


def _progress_bar() -> Any:
    """A started bar on stderr: ``job-… ━━━━━━━━━╺━━━━━━ 612/1000 0:00:41``."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True))
    bar.start()
    return bar


class Job(_JobOps, flavor="sync"):
    pass


class AsyncJob(_JobOps, flavor="async"):
    pass


class _JobsOps(Flavored):
    _job: type[_JobOps]  # what this flavour returns

    @operation
    def create(self, environment: str, *, count: int, weight: float = 1.0, priority: int = 0,
               labels: dict[str, str] | None = None, **spec: Any) -> Op[Any]:
        body = {"spec": create_body(environment, **spec).to_dict(), "count": count, "weight": weight,
                "priority": priority, "labels": labels or {}}
        return self._job(self._corral, (yield calls.create_job(body)))

    @operation
    def get(self, job_id: str) -> Op[Any]:
        return self._job(self._corral, (yield calls.get_job(job_id)))

    @operation
    def delete(self, job_id: str) -> Op[Any]:
        return self._job(self._corral, (yield calls.delete_job(job_id)))

    @operation
    def list(self, include_deleted: bool = False) -> Op[list[Any]]:
        """Your jobs, newest first (each with its counts per state)."""
        return [self._job(self._corral, info) for info in (yield calls.list_jobs(include_deleted))]


class Jobs(_JobsOps, flavor="sync"):
    _job = Job


class AsyncJobs(_JobsOps, flavor="async"):
    _job = AsyncJob
