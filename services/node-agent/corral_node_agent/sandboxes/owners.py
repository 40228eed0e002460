"""Who owns each sandbox this node runs, on the node's own disk: what it needs to register
its sandboxes again when Redis lost them (a Redis restarted without its data).

One JSON file per sandbox, {state_dir}/owners/<id>.json (dir 0700), written before the
sandbox starts and removed once it is gone; every backend's sandboxes alike. A file is
replaced atomically (written aside, then renamed), so a crashed agent leaves the old one
or the new one, never half of one. No fsync: what it describes (running processes) does
not outlive a power cut either.
"""

import json
import os
import re
from dataclasses import dataclass

from pydantic import ValidationError

from corral_common.contracts.images import EnvironmentLayer
from corral_common.contracts.sandboxes import SandboxSpec, SandboxState
from corral_common.logging import get_logger
from corral_common.store.state_records import SandboxRecord

log = get_logger(__name__)
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class OwnerRecord:
    sandbox_id: str
    tenant: str
    spec: SandboxSpec
    created_at: float
    started_at: float
    required_node: str | None = None
    job_id: str | None = None
    # The layers it was started on (base first), once they are known: a restarted agent holds
    # them again for its adopted sandboxes (their references, and a lazy layer's faults).
    layers: tuple[EnvironmentLayer, ...] = ()

    @classmethod
    def of(cls, record: SandboxRecord, spec: SandboxSpec, started_at: float) -> "OwnerRecord":
        return cls(sandbox_id=record.id, tenant=record.tenant, spec=spec, created_at=record.created_at,
                   started_at=record.started_at or started_at, required_node=record.required_node,
                   job_id=record.job_id)

    def to_json(self) -> dict:
        return {"id": self.sandbox_id, "tenant": self.tenant, "spec": self.spec.model_dump(mode="json"),
                "created_at": self.created_at, "started_at": self.started_at, "required_node": self.required_node,
                "job_id": self.job_id, "layers": [layer.model_dump(mode="json") for layer in self.layers]}

    @classmethod
    def from_json(cls, data: dict) -> "OwnerRecord":
        return cls(sandbox_id=data["id"], tenant=data["tenant"], spec=SandboxSpec.model_validate(data["spec"]),
                   created_at=float(data["created_at"]), started_at=float(data["started_at"]),
                   required_node=data.get("required_node"), job_id=data.get("job_id"),
                   layers=tuple(EnvironmentLayer.model_validate(layer) for layer in data.get("layers") or ()))

    def record(self, node_id: str, state: SandboxState, runtime: dict[str, str], now: float) -> SandboxRecord:
        """The sandbox record this node would register for it."""
        return SandboxRecord(id=self.sandbox_id, tenant=self.tenant, state=state, spec=self.spec,
                             created_at=self.created_at, updated_at=now, node_id=node_id, started_at=self.started_at,
                             runtime=runtime, required_node=self.required_node, job_id=self.job_id)


class OwnerRecords:
    def __init__(self, directory: str):
        self.directory = directory
        os.makedirs(directory, mode=0o700, exist_ok=True)

    def _path(self, sandbox_id: str) -> str:
        if not _ID_RE.match(sandbox_id):
            raise ValueError(f"invalid sandbox id {sandbox_id!r}")
        return f"{self.directory}/{sandbox_id}.json"

    def write(self, owner: OwnerRecord) -> None:
        path = self._path(owner.sandbox_id)
        tmp = f"{path}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(owner.to_json(), fh)
        os.replace(tmp, path)

    def get(self, sandbox_id: str) -> OwnerRecord | None:
        """None when the node has no (readable) record of it."""
        try:
            with open(self._path(sandbox_id)) as fh:
                return OwnerRecord.from_json(json.load(fh))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
            log.warning("sandbox.owner_unreadable", sandbox_id=sandbox_id, error=str(exc))
            return None

    def remove(self, sandbox_id: str) -> None:
        try:
            os.unlink(self._path(sandbox_id))
        except FileNotFoundError:
            pass

    def ids(self) -> set[str]:
        return {name[:-5] for name in os.listdir(self.directory) if name.endswith(".json")}

    def prune(self, keep: set[str]) -> None:
        """Forget every sandbox but ``keep`` (at start: those that did not survive the last run)."""
        for name in os.listdir(self.directory):
            if name.endswith(".tmp") or (name.endswith(".json") and name.removesuffix(".json") not in keep):
                os.unlink(f"{self.directory}/{name}")  # (not a directory beside them: the warm pool's)
