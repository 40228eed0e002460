"""The interface every sandbox runtime implements (containers today, microVMs later).

Modelled on SWE-ReX deployments: start/stop a runtime, then run commands and move files
through it. A backend knows nothing about images: the caller hands it ready lower dirs.
"""

import abc
from collections.abc import AsyncIterator, Awaitable, Callable
from enum import StrEnum

from corral_common.display import InputEvent
from corral_common.errors import Conflict
from corral_common.exec import ExecChunk, ExecRequest, ExecResult, FileInfo
from corral_common.sandboxes import SandboxSpec, Usage


class ExitReason(StrEnum):
    """Why a sandbox ended without being asked to. Values match FailureReason where they overlap."""

    exited = "exited"
    oom_killed = "oom_killed"
    timeout = "timeout"
    # A lazily loaded layer could not be read (image-service gone past the fetch deadline).
    image_unavailable = "image_unavailable"
    # VMs: the guest kernel panicked (or reset itself), or its agent stopped answering.
    guest_panic = "guest_panic"
    guest_unresponsive = "guest_unresponsive"


# Called once per sandbox that ended on its own (init died, or timeout_s elapsed), after the
# backend has already torn it down; stop() afterwards is a no-op returning the same usage.
ExitCallback = Callable[[str, ExitReason, Usage], Awaitable[None] | None]

FileData = bytes | AsyncIterator[bytes]


class Unsupported(Conflict):
    """The sandbox's kind cannot do this (a container has no screen...)."""

    code = "unsupported_by_backend"


class SandboxBackend(abc.ABC):
    on_exit: ExitCallback | None = None
    # What start() gets as lower_dirs: "mounts" = mounted layer dirs (containers);
    # "files" = layer image files, top first (VMs attach them as disks);
    # "dax_files" = uncompressed, 2 MiB-aligned layer files a guest can map with DAX.
    layer_format: str = "mounts"

    def layer_format_for(self, spec: SandboxSpec) -> str:
        return self.layer_format

    @abc.abstractmethod
    async def start(self, sandbox_id: str, spec: SandboxSpec, lower_dirs: list[str]) -> None:
        """Start a sandbox whose root is an overlay of lower_dirs (top first)."""

    @abc.abstractmethod
    async def stop(self, sandbox_id: str) -> Usage:
        """Stop and remove everything; idempotent (unknown ids return an empty Usage)."""

    @abc.abstractmethod
    async def exec(self, sandbox_id: str, req: ExecRequest) -> ExecResult: ...

    @abc.abstractmethod
    def exec_stream(self, sandbox_id: str, req: ExecRequest) -> AsyncIterator[ExecChunk]:
        """Output chunks as produced, then one `exit` chunk carrying the ExecResult."""

    @abc.abstractmethod
    async def write_file(self, sandbox_id: str, path: str, data: FileData, mode: int = 0o644) -> int:
        """Create/replace a file; returns bytes written."""

    @abc.abstractmethod
    async def read_file(self, sandbox_id: str, path: str) -> bytes: ...

    @abc.abstractmethod
    async def open_file(self, sandbox_id: str, path: str) -> tuple[int, AsyncIterator[bytes]]:
        """Open for streaming: (size, chunks). Errors are raised here, before any byte is sent."""

    @abc.abstractmethod
    async def stat(self, sandbox_id: str, path: str) -> FileInfo: ...

    @abc.abstractmethod
    async def list_dir(self, sandbox_id: str, path: str) -> list[FileInfo]: ...

    @abc.abstractmethod
    def usage(self, sandbox_id: str) -> Usage: ...

    async def pause(self, sandbox_id: str) -> None:
        """Freeze every process of the sandbox (memory and files stay); idempotent."""
        raise NotImplementedError(f"{type(self).__name__} cannot pause")

    async def resume(self, sandbox_id: str) -> None:
        """Thaw a paused sandbox; idempotent."""
        raise NotImplementedError(f"{type(self).__name__} cannot resume")

    def describe(self, sandbox_id: str) -> dict[str, str]:
        """How this sandbox runs, for its record (accelerator, image transport...)."""
        return {}

    async def screenshot(self, sandbox_id: str) -> bytes:
        """The screen as a PNG."""
        raise Unsupported(f"{type(self).__name__} sandboxes have no display")

    async def send_input(self, sandbox_id: str, events: list[InputEvent]) -> None:
        raise Unsupported(f"{type(self).__name__} sandboxes have no display")

    async def snapshot(self, sandbox_id: str, snapshot_id: str) -> int:
        """Save the running sandbox under snapshot_id on this node; returns its size in bytes.
        The sandbox keeps running. start() with spec.from_snapshot restores it."""
        raise Unsupported(f"{type(self).__name__} sandboxes cannot be snapshotted")

    async def delete_snapshot(self, snapshot_id: str) -> None:
        raise Unsupported(f"{type(self).__name__} sandboxes cannot be snapshotted")

    @abc.abstractmethod
    def list_running(self) -> list[str]: ...

    async def cleanup_orphans(self, adopt: bool = False) -> list[str]:
        """Remove what a previous run of the agent left behind; with ``adopt``, take over
        the sandboxes still alive instead and return their ids."""
        return []

    def spec_of(self, sandbox_id: str) -> SandboxSpec:
        """The spec of a sandbox this backend runs (needed for adopted ones)."""
        raise NotImplementedError

    def is_paused(self, sandbox_id: str) -> bool:
        return False

    async def close(self) -> None:
        """Stop every sandbox (agent shutdown)."""
        for sid in self.list_running():
            await self.stop(sid)
