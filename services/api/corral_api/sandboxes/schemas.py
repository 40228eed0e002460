from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, field_validator, model_validator

from corral_common.contracts.network import Network
from corral_common.contracts.sandboxes import Requests, SandboxSpec, SandboxState, Usage
from corral_common.inputs import process_env, valid_disk_image, valid_id, valid_name
from corral_common.store.state_records import SandboxRecord


class SandboxCreate(SandboxSpec):
    """Request body of ``POST /v1/sandboxes`` (and the spec of a job or a rollout).

    ``environment`` and ``disk_image`` are names as image-service registers them (lowercase
    letters, digits, '.', '_' and '-'; a disk image may add ``:version``), else 422
    ``invalid_name``; one it does not know is 422 ``unknown_environment`` /
    ``unknown_disk_image``. ``env`` values must not contain NUL (422 ``invalid_text``).
    """

    # Stricter than the SandboxSpec it becomes (corral_common.inputs): records already stored
    # are read back as SandboxSpec, which does not judge their names again.

    _environment = field_validator("environment")(valid_name)
    _disk_image = field_validator("disk_image")(valid_disk_image)
    _from_snapshot = field_validator("from_snapshot")(valid_id)
    _env = field_validator("env")(process_env)

    # The fields the caller sent. Not model_fields_set: the spec's validator assigns the
    # resolved backend, which marks it as set.
    _requested: frozenset[str] = PrivateAttr(default=frozenset())

    @model_validator(mode="wrap")
    @classmethod
    def _remember_requested(cls, data: Any, handler: Any) -> "SandboxCreate":
        model = handler(data)
        if isinstance(data, dict):
            # backend "auto" says nothing (a restore must not read it as a contradiction).
            model._requested = frozenset(k for k in data if not (k == "backend" and data[k] == "auto"))
        return model

    @property
    def requested_fields(self) -> frozenset[str]:
        return self._requested


WaitState = Literal["scheduled", "starting", "running", "terminated"]


class Sandbox(BaseModel):
    id: str
    state: SandboxState
    reason: str | None = None
    error: str | None = Field(None, description="Why it failed, in words (reason is the code): a failed start's "
                                                "message, what no node has for it, how its node was lost")
    environment: str
    backend: str = Field(description="The resolved kind: container, microvm or vm")
    isolation: str = "container"
    display: bool = False
    disk_image: str | None = None
    from_snapshot: str | None = None
    # How its node runs it, once running: backend, and for VMs accelerator (kvm|tcg),
    # machine, image_transport (virtio-pmem+dax | virtio-blk)...
    runtime: dict[str, str] = Field(default_factory=dict)
    node_id: str | None = None
    # Its limits (what the node enforces) and its requests (what placement counted). The two
    # newer fields are optional in the schema so that an SDK reads an older api's replies too.
    cpu: float
    memory_mb: int
    disk_mb: int
    pids_limit: int | None = None
    requests: Requests | None = None
    timeout_s: int
    labels: dict[str, str] = Field(default_factory=dict)
    network: Network = "none"
    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    usage: Usage | None = None

    @classmethod
    def from_record(cls, record: SandboxRecord) -> "Sandbox":
        def ts(value: float | None) -> datetime | None:
            return datetime.fromtimestamp(value, UTC) if value is not None else None

        spec = record.spec
        return cls(
            id=record.id, state=record.state, reason=record.reason, error=record.error, environment=spec.environment,
            backend="container" if spec.backend == "auto" else spec.backend, isolation=spec.isolation,
            display=spec.display, disk_image=spec.disk_image, from_snapshot=spec.from_snapshot,
            runtime=record.runtime, node_id=record.node_id,
            cpu=spec.cpu, memory_mb=spec.memory_mb, disk_mb=spec.disk_mb, pids_limit=spec.pids_limit,
            requests=Requests(**vars(spec.reservation)), timeout_s=spec.timeout_s,
            labels=spec.labels, network=spec.network, created_at=ts(record.created_at), started_at=ts(record.started_at),
            ended_at=ts(record.ended_at), usage=record.usage,
        )


class SandboxList(BaseModel):
    items: list[Sandbox]
    next_after: str | None = Field(None, description="With limit: pass as after= for the next page (null: the last)")
