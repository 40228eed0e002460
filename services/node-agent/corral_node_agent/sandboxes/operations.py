"""What is asked of a running sandbox, routed to its backend: the data path (commands, files,
ports; each call counted as use by the activity tracker) and the optional operations a backend
lists as a capability (pause, balloon, screen, snapshots, commits; ``Unsupported`` otherwise,
whichever backend it is)."""

import socket
from collections.abc import AsyncIterator

from corral_common.contracts.display import InputEvent
from corral_common.contracts.exec import ExecChunk, ExecRequest, ExecResult, FileInfo
from corral_common.contracts.memory import BalloonState, SandboxActivity
from corral_common.contracts.network import NetworkPolicy
from corral_common.contracts.node import CommitReply, CommitRequest
from corral_node_agent.backends.base import Capability, FileData
from corral_node_agent.errors import NotFound, Unsupported
from corral_node_agent.sandboxes.commits import LayerUploads
from corral_node_agent.sandboxes.registry import SandboxRegistry


class SandboxOperations(SandboxRegistry):
    # Where commits go (image-service); None: this node cannot commit.
    uploads: LayerUploads | None = None

    async def pause(self, sandbox_id: str) -> None:
        await self._capable(sandbox_id, Capability.pause).pause(sandbox_id)

    async def resume(self, sandbox_id: str) -> None:
        await self._capable(sandbox_id, Capability.pause).resume(sandbox_id)

    async def balloon(self, sandbox_id: str) -> BalloonState:
        return await self._capable(sandbox_id, Capability.balloon).balloon(sandbox_id)

    async def set_balloon(self, sandbox_id: str, target_mb: int) -> None:
        await self._capable(sandbox_id, Capability.balloon).set_balloon(sandbox_id, target_mb)

    async def set_network(self, sandbox_id: str, network: NetworkPolicy) -> None:
        self._require(sandbox_id)
        await self._backend_of(sandbox_id).set_network(sandbox_id, network)

    async def network_state(self, sandbox_id: str) -> dict:
        """Counters and the latest refusals of the sandbox's egress (empty for network "none")."""
        self._require(sandbox_id)
        egress = getattr(self._backend_of(sandbox_id), "egress", None)
        if egress is None:
            return {"counters": {}, "denied": []}
        return {"counters": await egress.counters(sandbox_id),
                "denied": [{"at": at, "target": target, "reason": reason}
                           for at, target, reason in egress.recent_denials(sandbox_id)]}

    # ---- commits ------------------------------------------------------------------------

    async def commit(self, sandbox_id: str, request: CommitRequest) -> tuple[CommitReply, int]:
        """The sandbox's writable layer as a new ``diff`` layer in image-service; returns
        image-service's layer and status."""
        backend = self._capable(sandbox_id, Capability.commit)
        if self.uploads is None:
            raise Unsupported("this node cannot commit (no image-service uploads configured)")
        return await self.uploads.commit(backend, sandbox_id, request)

    # ---- screens and snapshots ------------------------------------------------------------

    async def screenshot(self, sandbox_id: str) -> bytes:
        return await self._capable(sandbox_id, Capability.screen).screenshot(sandbox_id)

    async def send_input(self, sandbox_id: str, events: list[InputEvent]) -> None:
        await self._capable(sandbox_id, Capability.screen).send_input(sandbox_id, events)

    async def snapshot(self, sandbox_id: str, snapshot_id: str) -> int:
        """Save the sandbox's state on this node's disk; returns the size in bytes."""
        return await self._capable(sandbox_id, Capability.snapshot).snapshot(sandbox_id, snapshot_id)

    async def delete_snapshot(self, snapshot_id: str, kind: str | None = None) -> None:
        """Remove a saved snapshot of backend ``kind`` (404 when it is not on this node).
        Without ``kind``, every backend that can snapshot is asked (the node keeps no index of
        its snapshots) and a snapshot found nowhere is no error. A kind this node does not run
        cannot have left a snapshot here: nothing to do."""
        if kind is not None:
            backend = self.backends.get(kind)
            if backend is not None:
                if Capability.snapshot not in backend.capabilities:
                    raise backend.unsupported(Capability.snapshot)
                await backend.delete_snapshot(snapshot_id)
            return
        for backend in self.backends.values():
            if Capability.snapshot in backend.capabilities:
                try:
                    await backend.delete_snapshot(snapshot_id)
                except NotFound:
                    continue

    # ---- data path ----------------------------------------------------------------------

    async def exec(self, sandbox_id: str, req: ExecRequest, counted: bool = True) -> ExecResult:
        """``counted`` False: housekeeping (the memory-manager's), not use of the sandbox."""
        self._require(sandbox_id)
        with self.activity.call(sandbox_id, counted):
            return await self._backend_of(sandbox_id).exec(sandbox_id, req)

    def exec_stream(self, sandbox_id: str, req: ExecRequest, counted: bool = True) -> AsyncIterator[ExecChunk]:
        self._require(sandbox_id)
        return self.activity.stream(sandbox_id, self._backend_of(sandbox_id).exec_stream(sandbox_id, req), counted)

    async def write_file(self, sandbox_id: str, path: str, data: FileData, mode: int = 0o644) -> int:
        self._require(sandbox_id)
        with self.activity.call(sandbox_id):
            return await self._backend_of(sandbox_id).write_file(sandbox_id, path, data, mode)

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        self._require(sandbox_id)
        with self.activity.call(sandbox_id):
            return await self._backend_of(sandbox_id).read_file(sandbox_id, path)

    async def open_file(self, sandbox_id: str, path: str) -> tuple[int, AsyncIterator[bytes]]:
        self._require(sandbox_id)
        size, chunks = await self._backend_of(sandbox_id).open_file(sandbox_id, path)
        return size, self.activity.stream(sandbox_id, chunks)

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        self._require(sandbox_id)
        with self.activity.call(sandbox_id):
            return await self._backend_of(sandbox_id).stat(sandbox_id, path)

    async def list_dir(self, sandbox_id: str, path: str) -> list[FileInfo]:
        self._require(sandbox_id)
        with self.activity.call(sandbox_id):
            return await self._backend_of(sandbox_id).list_dir(sandbox_id, path)

    def activity_snapshot(self) -> list[SandboxActivity]:
        """Every running or paused sandbox's data-path use (starting and failed ones are not
        sandboxes to reclaim yet)."""
        live = {sid: entry.kind for sid, entry in list(self._entries.items()) if self.is_live(sid)}
        out = self.activity.snapshot(live)
        for activity in out:
            name = self.runtime_id(activity.sandbox_id)
            if name != activity.sandbox_id:  # claimed from the warm pool: its cgroup keeps its first name
                activity.cgroup = name
        return out

    async def connect_port(self, sandbox_id: str, port: int) -> socket.socket:
        """A TCP connection to ``port`` inside the sandbox (port ingress): its opening is use."""
        with self.activity.call(sandbox_id):
            return await self._capable(sandbox_id, Capability.ports).connect_port(sandbox_id, port)
