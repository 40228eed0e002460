"""``corral.snapshots``: saved VM states (taken with ``Sandbox.snapshot()``).

    snap = sb.snapshot()                                   # the VM keeps running
    restored = corral.sandboxes.create(from_snapshot=snap.id)
    corral.snapshots.delete(snap.id)

``Snapshots`` (sync) and ``AsyncSnapshots`` are the operations of ``_SnapshotsOps``.
"""

from corral import _calls as calls
from corral._transport import Flavored, operation
from corral_client.models import Snapshot


class _SnapshotsOps(Flavored):
    @operation
    def list(self, sandbox_id: str | None = None) -> calls.Call[list[Snapshot]]:
        """This tenant's snapshots, oldest first (optionally only those of one sandbox)."""
        return calls.list_snapshots(sandbox_id)

    @operation
    def get(self, snapshot_id: str) -> calls.Call[Snapshot]:
        return calls.get_snapshot(snapshot_id)

    @operation
    def delete(self, snapshot_id: str) -> calls.Call[Snapshot]:
        """Remove the saved state (sandboxes restored from it keep running)."""
        return calls.delete_snapshot(snapshot_id)


class Snapshots(_SnapshotsOps, flavor="sync"):
    pass


class AsyncSnapshots(_SnapshotsOps, flavor="async"):
    pass
