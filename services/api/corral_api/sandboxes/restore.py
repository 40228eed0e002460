"""The spec of a sandbox restored from a snapshot: the machine's shape comes from the snapshot.

A saved VM state only fits a machine like the one it was taken on (same kind, image, memory,
CPUs, disk), so those fields are copied from the snapshot. A request may repeat them; one that
asks for something else is refused (422, naming the field) rather than silently changed.
"""

from typing import Any, Protocol

from corral_common.contracts.sandboxes import BackendKind, SandboxSpec
from corral_common.web.errors import Unprocessable


class SavedSnapshot(Protocol):
    """What a restore reads of a snapshot's record (corral_api.snapshots keeps them)."""

    @property
    def tenant(self) -> str: ...

    @property
    def node_id(self) -> str: ...

    @property
    def spec(self) -> dict[str, Any]: ...


class SnapshotLookup(Protocol):
    """Finds a snapshot's record by id (``SnapshotRepository``): the sandboxes domain reads
    snapshots through this, so it does not depend on the snapshots domain that depends on it."""

    def get(self, snapshot_id: str) -> SavedSnapshot | None: ...


# Fields a restored sandbox inherits from its snapshot.
INHERITED = ("backend", "environment", "disk_image", "display", "isolation", "memory_mb", "cpu", "disk_mb")


def restored_spec(request: SandboxSpec, snapshot_spec: dict[str, Any], explicit: set[str] | frozenset[str]) -> SandboxSpec:
    """``request`` with the inherited fields taken from ``snapshot_spec`` (the source sandbox's
    spec); ``explicit`` are the fields the caller set (``model_fields_set``)."""
    source = SandboxSpec.model_validate(snapshot_spec)
    for name in INHERITED:
        if name not in explicit:
            continue
        wanted, saved = getattr(request, name), getattr(source, name)
        if name == "isolation" and wanted == "vm" and source.backend != BackendKind.container:
            continue  # any VM kind gives the hardware boundary asked for
        if name == "display" and not wanted:
            continue  # not asking for a screen is no contradiction
        if wanted != saved:
            raise Unprocessable(
                f"{name}={wanted!r} contradicts snapshot {request.from_snapshot} ({name}={saved!r}); "
                f"a restored sandbox keeps its snapshot's {', '.join(INHERITED)}: leave {name} out",
                loc=["body", name], code="snapshot_mismatch")
    merged = request.model_dump()
    merged.update({name: getattr(source, name) for name in INHERITED})
    return SandboxSpec.model_validate(merged)
