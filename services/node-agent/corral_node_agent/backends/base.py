"""The interface every sandbox runtime implements: crun containers, QEMU microVMs and VMs.

Modelled on SWE-ReX deployments: start/stop a runtime, then run commands and move files
through it. A backend knows nothing about images: the caller hands it a ready ``RootFs``.

The contract (checked against every backend, the shipped ``FakeBackend`` included, by
tests/contract/test_backend_contract.py):

- errors are ``corral_node_agent.errors``, never HTTP ones; the same situation raises the
  same error in every backend: an id already in use → ``AlreadyExists``; exec (or a VM's
  file access) while paused → ``SandboxPaused``; exec, files or usage() of an unknown id →
  ``NotFound``; stop() of an unknown id → an empty ``Usage`` (stop is idempotent);
- a sandbox that ends on its own is torn down first, then reported once through
  ``on_exit``; a callback that raises is logged, never propagated into the backend;
- optional features are declared in ``capabilities``; the manager checks them and raises
  ``Unsupported`` for the rest, and so does each backend's default method.
"""

import abc
import asyncio
import socket
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from enum import StrEnum

from corral_common.contracts.display import InputEvent
from corral_common.contracts.exec import ExecChunk, ExecRequest, ExecResult, FileInfo
from corral_common.contracts.memory import BalloonState
from corral_common.contracts.network import NetworkPolicy
from corral_common.contracts.sandboxes import RuntimeInfo, SandboxSpec, Usage
from corral_common.logging import get_logger
from corral_node_agent.backends.types import LayerFormat, RootFs
from corral_node_agent.disks.pressure import OpenDisk
from corral_node_agent.errors import Unsupported

log = get_logger(__name__)


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


class Capability(StrEnum):
    """An optional part of the interface; a backend lists the ones it implements."""

    pause = "pause"  # pause(), resume(); is_paused() may say True
    screen = "screen"  # screenshot(), send_input()
    snapshot = "snapshot"  # snapshot(), delete_snapshot(); start() of a spec with from_snapshot
    # cleanup_orphans(adopt=True) takes over the sandboxes a previous agent run left alive; spec_of().
    adopt = "adopt"
    commit = "commit"  # commit_diff(): the writable layer as an OCI diff tar
    # connect_port(): TCP connections to a port inside the sandbox (HTTP ingress).
    ports = "ports"
    balloon = "balloon"  # balloon(), set_balloon(): a VM's virtio-balloon and its guest's memory stats
    # start_ahead(), claim(): sandboxes started before they are asked for (sandboxes/warm_pool.py).
    warm_pool = "warm_pool"


_LACKING = {Capability.pause: "cannot be paused", Capability.screen: "have no display",
            Capability.snapshot: "cannot be snapshotted", Capability.adopt: "cannot be adopted",
            Capability.commit: "cannot be committed (VMs: snapshot them)",
            Capability.ports: "do not offer port ingress", Capability.balloon: "have no memory balloon",
            Capability.warm_pool: "cannot be started ahead"}

# Called once per sandbox that ended on its own (init died, or timeout_s elapsed), after the
# backend has already torn it down; stop() afterwards is a no-op returning the same usage.
ExitCallback = Callable[[str, ExitReason, Usage], Awaitable[None] | None]

FileData = bytes | AsyncIterator[bytes]

# How many ended sandboxes' usage a backend remembers for stop()/usage() after the end.
FINISHED_KEEP = 1024


class FinishedUsage(OrderedDict[str, Usage]):
    """The usage of the sandboxes that ended lately (the oldest forgotten first)."""

    def add(self, sandbox_id: str, usage: Usage) -> None:
        self[sandbox_id] = usage
        while len(self) > FINISHED_KEEP:
            self.popitem(last=False)


class SandboxBackend(abc.ABC):
    on_exit: ExitCallback | None = None
    # What start() gets as RootFs.layers.
    layer_format: LayerFormat = LayerFormat.mounts
    capabilities: frozenset[Capability] = frozenset()

    def unsupported(self, capability: Capability) -> Unsupported:
        """The error for using a capability this backend lacks."""
        return Unsupported(f"{type(self).__name__} sandboxes {_LACKING[capability]}")

    async def _report_exit(self, sandbox_id: str, reason: ExitReason, usage: Usage) -> None:
        """Tell on_exit that a sandbox ended on its own (call after its teardown). A failing
        callback is logged: it must not break the backend's own supervision."""
        if self.on_exit is None:
            return
        try:
            res = self.on_exit(sandbox_id, reason, usage)
            if asyncio.iscoroutine(res):
                await res
        except Exception:
            log.exception("sandbox.on_exit_failed", sandbox_id=sandbox_id)

    @abc.abstractmethod
    async def start(self, sandbox_id: str, spec: SandboxSpec, rootfs: RootFs) -> None:
        """Start a sandbox on rootfs; AlreadyExists when the id is in use, StartFailed when it
        cannot start (nothing is left behind then)."""

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
    def usage(self, sandbox_id: str) -> Usage:
        """Resources used so far (or in total, once ended); NotFound for an unknown id."""

    @abc.abstractmethod
    def list_running(self) -> list[str]: ...

    def runtime_id(self, sandbox_id: str) -> str:
        """The name its runtime, cgroup and directory know it by: its id, unless it was
        started ahead and claimed (Capability.warm_pool)."""
        return sandbox_id

    def open_disks(self) -> list[OpenDisk]:
        """The disks of its running sandboxes the host can hold back when its own filesystem
        runs short (disks/pressure.py), each with a descriptor the caller closes."""
        return []

    def disk_limit_bytes(self) -> int:
        """What the disks of ``open_disks`` could take of the host at most (their sizes)."""
        return 0

    def describe(self, sandbox_id: str) -> RuntimeInfo:
        """How this sandbox runs, for its record (accelerator, image transport...)."""
        return {}

    async def cleanup_orphans(self, adopt: bool = False, pooled: Collection[str] = ()) -> list[str]:
        """Remove what a previous run of the agent left behind; with ``adopt`` (Capability.adopt),
        take over the sandboxes still alive instead and return their ids, and (Capability.warm_pool)
        those of ``pooled``, started ahead and never claimed, under their runtime ids."""
        return []

    async def close(self) -> None:
        """Stop every sandbox (agent shutdown)."""
        for sid in self.list_running():
            await self.stop(sid)

    # ---- optional: see capabilities ---------------------------------------------------

    async def pause(self, sandbox_id: str) -> None:
        """Freeze every process of the sandbox (memory and files stay); idempotent."""
        raise self.unsupported(Capability.pause)

    async def resume(self, sandbox_id: str) -> None:
        """Thaw a paused sandbox; idempotent."""
        raise self.unsupported(Capability.pause)

    def is_paused(self, sandbox_id: str) -> bool:
        return False

    async def screenshot(self, sandbox_id: str) -> bytes:
        """The screen as a PNG."""
        raise self.unsupported(Capability.screen)

    async def send_input(self, sandbox_id: str, events: list[InputEvent]) -> None:
        raise self.unsupported(Capability.screen)

    async def snapshot(self, sandbox_id: str, snapshot_id: str) -> int:
        """Save the running sandbox under snapshot_id on this node; returns its size in bytes.
        The sandbox keeps running. start() with spec.from_snapshot restores it."""
        raise self.unsupported(Capability.snapshot)

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """NotFound when this node has no such snapshot."""
        raise self.unsupported(Capability.snapshot)

    async def balloon(self, sandbox_id: str) -> BalloonState:
        raise self.unsupported(Capability.balloon)

    async def set_balloon(self, sandbox_id: str, target_mb: int) -> None:
        raise self.unsupported(Capability.balloon)

    async def set_network(self, sandbox_id: str, network: NetworkPolicy) -> None:
        """Replace a running sandbox's egress rules (network/egress.py); in force on return.
        ``BadInput`` for a sandbox started with ``network: "none"`` (it has no interface)."""
        raise Unsupported("this kind of sandbox has no egress rules to change")

    async def commit_diff(self, sandbox_id: str, out_path: str) -> int:
        """Write the sandbox's writable layer (its changes to the image) to ``out_path`` as an
        OCI layer tar, deletions as whiteouts, while its processes are frozen; returns the
        number of entries. The sandbox keeps running."""
        raise self.unsupported(Capability.commit)

    async def connect_port(self, sandbox_id: str, port: int) -> socket.socket:
        """A connected, non-blocking TCP socket to ``port`` on the sandbox's own loopback (its
        network stays closed: the socket is made inside the sandbox's namespace by the node).
        ``PortClosed`` when nothing listens there."""
        raise self.unsupported(Capability.ports)

    async def start_ahead(self, runtime_id: str, spec: SandboxSpec, rootfs: RootFs) -> None:
        """start(), for a sandbox nobody asked for yet: it runs as ``runtime_id`` until
        claim() gives it its id; it is no sandbox until then (not adopted after a restart)."""
        raise self.unsupported(Capability.warm_pool)

    async def claim(self, started_id: str, sandbox_id: str, spec: SandboxSpec) -> None:
        """Make the sandbox started ahead as ``started_id`` the sandbox ``sandbox_id`` with
        ``spec`` (equal to the one it was started with, but for its lifetime and labels);
        NotFound when it ended meanwhile."""
        raise self.unsupported(Capability.warm_pool)

    def spec_of(self, sandbox_id: str) -> SandboxSpec:
        """The spec of a sandbox this backend runs (needed for adopted ones)."""
        raise self.unsupported(Capability.adopt)
