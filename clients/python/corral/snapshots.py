"""``corral.snapshots``: saved VM states (taken with ``Sandbox.snapshot()``).

    snap = sb.snapshot()                                   # the VM keeps running
    restored = corral.sandboxes.create(from_snapshot=snap.id)
    corral.snapshots.delete(snap.id)
"""

from typing import TYPE_CHECKING, Any

from corral.errors import raise_for
from corral_client.api.snapshots import delete_snapshot, get_snapshot, list_snapshots
from corral_client.models import Snapshot

if TYPE_CHECKING:
    from corral.aio import AsyncCorral
    from corral.client import Corral


def _parsed(response: Any) -> Any:
    raise_for(response.status_code, response.content)
    return response.parsed


class Snapshots:
    def __init__(self, corral: "Corral"):
        self._corral = corral

    def list(self, sandbox_id: str | None = None) -> list[Snapshot]:
        """This tenant's snapshots, oldest first (optionally only those of one sandbox)."""
        kwargs: dict[str, Any] = {"sandbox_id": sandbox_id} if sandbox_id else {}
        return _parsed(list_snapshots.sync_detailed(client=self._corral.api, **kwargs)).items

    def get(self, snapshot_id: str) -> Snapshot:
        return _parsed(get_snapshot.sync_detailed(snapshot_id, client=self._corral.api))

    def delete(self, snapshot_id: str) -> Snapshot:
        """Remove the saved state (sandboxes restored from it keep running)."""
        return _parsed(delete_snapshot.sync_detailed(snapshot_id, client=self._corral.api))


class AsyncSnapshots:
    def __init__(self, corral: "AsyncCorral"):
        self._corral = corral

    async def list(self, sandbox_id: str | None = None) -> list[Snapshot]:
        kwargs: dict[str, Any] = {"sandbox_id": sandbox_id} if sandbox_id else {}
        return _parsed(await list_snapshots.asyncio_detailed(client=self._corral.api, **kwargs)).items

    async def get(self, snapshot_id: str) -> Snapshot:
        return _parsed(await get_snapshot.asyncio_detailed(snapshot_id, client=self._corral.api))

    async def delete(self, snapshot_id: str) -> Snapshot:
        return _parsed(await delete_snapshot.asyncio_detailed(snapshot_id, client=self._corral.api))
