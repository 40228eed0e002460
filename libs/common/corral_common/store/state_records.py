"""A sandbox's record in Redis (the hash ``sb:<id>``) and what a transition of it answers."""

import json
from dataclasses import dataclass, field
from typing import NamedTuple

from corral_common.contracts.images import ResolvedImage
from corral_common.contracts.sandboxes import (
    SandboxSpec,
    SandboxState,
    Usage,
)

# Terminal records stay readable in Redis this long; SQL keeps them for good.
TERMINAL_TTL_S = 3600


def sandbox_key(sandbox_id: str) -> str:
    return f"sb:{sandbox_id}"


@dataclass
class SandboxRecord:
    id: str
    tenant: str
    state: SandboxState
    spec: SandboxSpec
    created_at: float
    updated_at: float
    reason: str | None = None
    # Why it failed, in words (reason is the code): a failed start's message, what no node has.
    error: str | None = None
    node_id: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    usage: Usage | None = None
    delete_requested: bool = False
    # How the node runs it (backend.describe(): accelerator, machine, image transport...).
    runtime: dict[str, str] = field(default_factory=dict)
    # The only node that may take it (a restored snapshot lives on that node's disk).
    required_node: str | None = None
    # The job it belongs to (jobs.enqueue writes it).
    job_id: str | None = None
    # Its environment as the api resolved it at create (layers, owner, config): what the
    # scheduler places it by and the node starts it on. None: nothing to resolve (a disk
    # image alone), a restored snapshot, or a record from before pins (the node resolves the name).
    # compat(d03aa3f, 2026-12-07): the unpinned cases go once snapshot and job rows keep their pin
    # and 7 days (the longest timeout_s) have passed since every api runs d03aa3f or later.
    image: ResolvedImage | None = None

    @property
    def why(self) -> str:
        """`` (reason: error)`` for a message about its state; empty when nothing is recorded."""
        said = ": ".join(s for s in (self.reason, self.error) if s)
        return f" ({said})" if said else ""

    @classmethod
    def from_hash(cls, data: dict[str, str]) -> "SandboxRecord":
        def opt_float(key: str) -> float | None:
            return float(data[key]) if data.get(key) else None

        return cls(
            id=data["id"],
            tenant=data["tenant"],
            state=SandboxState(data["state"]),
            spec=SandboxSpec.model_validate_json(data["spec"]),
            created_at=float(data["created_at"]),
            updated_at=float(data.get("updated_at") or data["created_at"]),
            reason=data.get("reason") or None,
            error=data.get("error") or None,
            node_id=data.get("node_id") or None,
            started_at=opt_float("started_at"),
            ended_at=opt_float("ended_at"),
            usage=Usage.model_validate_json(data["usage"]) if data.get("usage") else None,
            delete_requested=data.get("delete_requested") == "1",
            runtime=json.loads(data["runtime"]) if data.get("runtime") else {},
            required_node=data.get("required_node") or None,
            job_id=data.get("job_id") or None,
            image=ResolvedImage.model_validate_json(data["image"]) if data.get("image") else None,
        )

    def to_hash(self) -> dict[str, str]:
        """The Redis hash of this record (from_hash's inverse; empty fields are left out)."""
        data = {"id": self.id, "tenant": self.tenant, "state": self.state.value, "spec": self.spec.model_dump_json(),
                "created_at": repr(self.created_at), "updated_at": repr(self.updated_at)}
        optional = {"reason": self.reason, "error": self.error, "node_id": self.node_id, "required_node": self.required_node,
                    "job_id": self.job_id, "started_at": None if self.started_at is None else repr(self.started_at),
                    "ended_at": None if self.ended_at is None else repr(self.ended_at),
                    "usage": self.usage.model_dump_json() if self.usage else None,
                    "runtime": json.dumps(self.runtime, sort_keys=True) if self.runtime else None,
                    "delete_requested": "1" if self.delete_requested else None,
                    "image": self.image.model_dump_json() if self.image else None}
        return data | {k: v for k, v in optional.items() if v}


class Transition(NamedTuple):
    changed: bool
    previous: SandboxState | None
    tenant: str
    node_id: str | None
    ended: SandboxRecord | None = None  # a terminal transition's record, as it ended
