"""Commit and fork: a sandbox's state as the start of others.

Commit (containers): the node freezes the sandbox, writes its writable layer (the overlay's
upper dir; deletions as whiteouts) as an OCI diff tar and uploads it to image-service as a
``diff`` layer of the tenant (counted in its storage quota); optionally an environment is
made of the sandbox's environment plus that layer, with the same config. The sandbox keeps
running. Fork: N new sandboxes from the current state — containers from a commit (files;
processes are not carried: no CRIU on this platform, so they start fresh), VMs from a snapshot
(memory and disk; every restore runs on the node holding it).
"""

import secrets
import time

from corral_api.commits.schemas import CommitRequest, CommitResult
from corral_api.images.schemas import EnvironmentCreate, Layer
from corral_api.images.service import ImageCatalogService
from corral_api.sandboxes.schemas import SandboxCreate
from corral_api.sandboxes.service import SandboxService
from corral_api.snapshots.service import SnapshotService
from corral_common.contracts.node import CommitRequest as NodeCommitRequest
from corral_common.contracts.node_client import NodeAgentClient
from corral_common.contracts.sandboxes import VM_BACKENDS, SandboxState
from corral_common.store.state_records import SandboxRecord
from corral_common.web.errors import Conflict

LIVE = frozenset({SandboxState.running, SandboxState.paused})
FORKED_FROM_LABEL = "corral.forked_from"


def default_version() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


class CommitService:
    def __init__(self, sandboxes: SandboxService, node_client: NodeAgentClient, images: ImageCatalogService,
                 snapshots: SnapshotService):
        self.sandboxes, self.node_client, self.images, self.snapshots = sandboxes, node_client, images, snapshots

    async def commit(self, tenant: str, sandbox_id: str, body: CommitRequest) -> CommitResult:
        record, node = await self.sandboxes.node_for(tenant, sandbox_id, LIVE)
        if record.spec.backend in VM_BACKENDS:
            raise Conflict(f"sandbox {sandbox_id} is a {record.spec.backend}: VMs are saved whole with "
                           f"POST /v1/sandboxes/{sandbox_id}/snapshot (fork uses it)", loc=["path", "sandbox_id"],
                           code="unsupported_by_backend")
        if not record.spec.environment:
            raise Conflict(f"sandbox {sandbox_id} has no environment to commit on top of", loc=["path", "sandbox_id"],
                           code="unsupported_by_backend")
        name = body.name or f"commit-{sandbox_id.removeprefix('sb-')}"
        # Not validated here: the node does, and its 422 (a default name too long for a layer) is passed on.
        reply = await self.node_client.commit(node.url, sandbox_id, NodeCommitRequest.model_construct(
            name=name, version=body.version or default_version(), owner=tenant, quota_bytes=self.images.quota_bytes))
        layer = Layer.of(reply.model_dump())
        if not body.environment:
            return CommitResult(layer=layer)
        parent = await self.images.get_environment(tenant, record.spec.environment)
        environment, _ = await self.images.create_environment(tenant, EnvironmentCreate(
            name=body.environment, base=parent.base, workspace=parent.workspace, toolkit=parent.toolkit,
            diffs=[*parent.diffs, layer.ref], config=parent.config))
        return CommitResult(layer=layer, environment=environment)

    async def fork(self, tenant: str, sandbox_id: str, count: int, processes: bool = False) -> list[SandboxRecord]:
        record = await self.sandboxes.get(tenant, sandbox_id)
        labels = {**record.spec.labels, FORKED_FROM_LABEL: sandbox_id}
        if record.spec.backend in VM_BACKENDS:
            snapshot = await self.snapshots.create(tenant, sandbox_id)
            spec = SandboxCreate.model_validate({"from_snapshot": snapshot.id, "labels": labels})
        else:
            if processes:
                raise Conflict("forking a container with its processes needs CRIU, which does not work on this "
                               "platform (Debian 12's criu 3.17 fails on this kernel): fork without processes "
                               "(files only) or use a VM", loc=["query", "processes"], code="criu_unavailable")
            token = secrets.token_hex(3)
            committed = await self.commit(tenant, sandbox_id, CommitRequest(
                name=f"fork-{sandbox_id.removeprefix('sb-')}", version=default_version(),
                environment=f"fork-{sandbox_id.removeprefix('sb-')}-{token}"))
            spec = record.spec.model_copy(update={"environment": committed.environment.name, "labels": labels})
        return [await self.sandboxes.create(tenant, spec) for _ in range(count)]
