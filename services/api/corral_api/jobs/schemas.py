from pydantic import BaseModel, Field, field_validator

from corral_api.sandboxes.schemas import SandboxCreate
from corral_common.contracts.sandboxes import check_labels
from corral_common.store.jobs import MAX_JOB_SANDBOXES


class JobCreate(BaseModel):
    """Request body of ``POST /v1/jobs``: ``count`` sandboxes of one spec."""

    spec: SandboxCreate
    count: int = Field(ge=1, le=MAX_JOB_SANDBOXES, description=f"Sandboxes to run, at most {MAX_JOB_SANDBOXES}")
    weight: float = Field(1.0, gt=0, le=1000, description="Share of admissions relative to concurrent jobs")
    priority: int = Field(0, ge=-100, le=100, description="Higher is admitted first; weight shares within a priority")
    labels: dict[str, str] = Field(default_factory=dict, description="Added to every sandbox (plus job=<id>)")

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        # The same rules as a sandbox's own labels: they end up in each sandbox's spec.
        return check_labels(value)


class Job(BaseModel):
    id: str
    count: int
    weight: float
    priority: int
    labels: dict[str, str]
    created_at: float
    deleted: bool
    submitted: int = Field(description="Sandbox records created and queued so far")
    admitted: int = Field(description="Sandboxes placed on a node so far")
    pending: int = Field(description="Sandboxes still queued")
    queue_position: int | None = Field(None, description="0: this job is admitted next; null when nothing is queued")
    counts: dict[str, int] = Field(default_factory=dict, description="Sandboxes per state")
    waiting_reason: str | None = Field(None, description="Why its next queued sandbox waits (which resource, "
                                       "on which nodes); null when nothing waits for room")


class JobList(BaseModel):
    items: list[Job]
