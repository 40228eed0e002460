"""Jobs: thousands of sandboxes of one spec in one call, admitted by fair share.

    with Corral() as corral:
        job = corral.jobs.create("busybox", count=1000, weight=2, timeout_s=30, labels={"run": "eval-7"})
        job.wait(progress=True)        # a tqdm bar when tqdm is installed
        print(job.counts)              # {"terminated": 1000}
        corral.sandboxes.list(labels={"job": job.id})
        job.delete()                   # terminates whatever still runs or waits
"""

import time
from typing import TYPE_CHECKING, Any

from corral._common import create_body
from corral.errors import raise_for

if TYPE_CHECKING:
    from corral.client import Corral

_ENDED = ("terminated", "failed", "expired")


class Job:
    def __init__(self, corral: "Corral", info: dict[str, Any]):
        self._corral = corral
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
        return f"Job({self.id!r}, count={self.info['count']}, counts={self.counts})"

    def refresh(self) -> "Job":
        self.info = self._corral.jobs._request("GET", f"/v1/jobs/{self.id}")
        return self

    def delete(self) -> "Job":
        self.info = self._corral.jobs._request("DELETE", f"/v1/jobs/{self.id}")
        return self

    def wait(self, until: str = "ended", timeout: float = 3600.0, poll_s: float = 1.0,
             progress: bool = False) -> "Job":
        """Until every sandbox ended (``until="ended"``) or at least ran (``"running"``)."""
        bar = None
        if progress:
            try:
                from tqdm import tqdm
                bar = tqdm(total=self.info["count"], desc=self.id, unit="sandbox")
            except ImportError:
                bar = None
        deadline = time.monotonic() + timeout
        try:
            while True:
                self.refresh()
                done = self.ended if until == "ended" else self.ended + self.counts.get("running", 0) \
                    + self.counts.get("paused", 0) + self.counts.get("stopping", 0)
                if bar is not None:
                    bar.update(done - bar.n)
                if done >= self.info["count"]:
                    return self
                if time.monotonic() > deadline:
                    raise TimeoutError(f"job {self.id}: {self.counts} after {timeout}s")
                time.sleep(poll_s)
        finally:
            if bar is not None:
                bar.close()


class Jobs:
    def __init__(self, corral: "Corral"):
        self._corral = corral

    def _request(self, method: str, url: str, **kw: Any) -> dict[str, Any]:
        response = self._corral.http.request(method, url, **kw)
        raise_for(response.status_code, response.content)
        return response.json()

    def create(self, environment: str, *, count: int, weight: float = 1.0, priority: int = 0,
               labels: dict[str, str] | None = None, **spec: Any) -> Job:
        body = {"spec": create_body(environment, **spec).to_dict(), "count": count, "weight": weight,
                "priority": priority, "labels": labels or {}}
        return Job(self._corral, self._request("POST", "/v1/jobs", json=body))

    def get(self, job_id: str) -> Job:
        return Job(self._corral, self._request("GET", f"/v1/jobs/{job_id}"))

    def delete(self, job_id: str) -> Job:
        return Job(self._corral, self._request("DELETE", f"/v1/jobs/{job_id}"))
