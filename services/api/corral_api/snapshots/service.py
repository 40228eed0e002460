"""Snapshots as the api sees them: a node saves the state, SQL keeps the record.

The state is written by the node that runs the sandbox (``POST <node>/v1/sandboxes/{id}/snapshot``)
and stays on that node's disk, so a sandbox restored from it is placed on that node. The SQL
row is written once the node has answered: a snapshot the caller was told about is durable;
one whose row could not be written is removed from its node again (no orphaned files).
A container cannot be snapshotted: its node answers 409 ``unsupported_by_backend``, passed on.
"""

import asyncio
import secrets
from datetime import UTC, datetime

from corral_api.sandboxes.service import SandboxService
from corral_api.snapshots.models import SnapshotRow
from corral_api.snapshots.repository import SnapshotRepository
from corral_api.snapshots.schemas import Snapshot
from corral_common.contracts.node import SnapshotRequest
from corral_common.contracts.node_client import NodeAgentClient
from corral_common.contracts.sandboxes import SandboxState
from corral_common.logging import get_logger
from corral_common.web.errors import CorralError, NotFound

log = get_logger(__name__)

_LIVE = frozenset({SandboxState.running, SandboxState.paused})


def to_schema(row: SnapshotRow) -> Snapshot:
    created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
    return Snapshot(id=row.id, sandbox_id=row.sandbox_id, node_id=row.node_id, backend=row.backend,
                    environment=row.environment, disk_image=row.disk_image, memory_mb=row.memory_mb, cpu=row.cpu,
                    size_bytes=row.size_bytes, created_at=created)


class SnapshotService:
    def __init__(self, repository: SnapshotRepository, sandboxes: SandboxService, nodes: NodeAgentClient):
        self.repository = repository
        self.sandboxes = sandboxes
        self.nodes = nodes

    async def create(self, tenant: str, sandbox_id: str) -> SnapshotRow:
        record, node = await self.sandboxes.node_for(tenant, sandbox_id, _LIVE)
        snapshot_id = f"snap-{secrets.token_hex(8)}"
        saved = await self.nodes.snapshot(node.url, sandbox_id, SnapshotRequest(snapshot_id=snapshot_id))
        spec = record.spec
        row = SnapshotRow(id=snapshot_id, tenant=tenant, sandbox_id=sandbox_id, node_id=node.node_id,
                          backend=spec.backend, environment=spec.environment, disk_image=spec.disk_image,
                          memory_mb=spec.memory_mb, cpu=spec.cpu, size_bytes=saved.size_bytes,
                          spec=spec.model_dump(mode="json"), created_at=datetime.now(UTC))
        try:
            await asyncio.to_thread(self.repository.add, row)
        except Exception:
            # No record (the database is away): the caller gets a 503, and the node's files,
            # which no call could reach or remove any more, go again.
            try:
                await self.nodes.delete_snapshot(node.url, snapshot_id, spec.backend)
            except CorralError as exc:
                log.error("snapshot.orphaned", snapshot_id=snapshot_id, node_id=node.node_id, error=exc.message)
            raise
        log.info("snapshot.created", snapshot_id=snapshot_id, sandbox_id=sandbox_id, node_id=node.node_id,
                 size_bytes=row.size_bytes)
        return row

    async def get(self, tenant: str, snapshot_id: str, loc: list[str | int] | None = None) -> SnapshotRow:
        row = await asyncio.to_thread(self.repository.get, snapshot_id)
        if row is None or row.tenant != tenant:
            # Another tenant's snapshot is indistinguishable from a missing one.
            raise NotFound(f"snapshot {snapshot_id} not found", loc=loc or ["path", "snapshot_id"],
                           code="snapshot_not_found")
        return row

    async def list(self, tenant: str, sandbox_id: str | None = None) -> list[SnapshotRow]:
        return list(await asyncio.to_thread(self.repository.list, tenant, sandbox_id))

    async def delete(self, tenant: str, snapshot_id: str) -> SnapshotRow:
        """Remove the saved state from its node, then the record. A node that is gone for good
        took the state with it: the record is removed anyway."""
        row = await self.get(tenant, snapshot_id)
        node = await self.sandboxes.store.get_node(row.node_id)
        if node is None:
            log.warning("snapshot.node_gone", snapshot_id=snapshot_id, node_id=row.node_id)
        else:
            try:
                await self.nodes.delete_snapshot(node.url, snapshot_id, row.backend)
            except CorralError as exc:
                if exc.status_code != 404:
                    raise  # node unreachable or refusing: keep the record, the caller may retry
                # Its files are already gone (a wiped node disk): only the record is left.
                log.warning("snapshot.files_gone", snapshot_id=snapshot_id, node_id=row.node_id)
        await asyncio.to_thread(self.repository.delete, snapshot_id)
        return row
