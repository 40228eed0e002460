"""SandboxManager: what the node-agent does with sandboxes, independent of transport.

The app (HTTP + AMQP events, wired elsewhere) calls create/delete and the data-path
methods; it learns about sandboxes that ended on their own through on_exit callbacks.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from corral_common.errors import CorralError, NotFound, ServiceUnavailable
from corral_common.exec import ExecChunk, ExecRequest, ExecResult, FileInfo
from corral_common.logging import get_logger
from corral_common.sandboxes import FailureReason, SandboxSpec, Usage

from ..backends.base import ExitReason, FileData, SandboxBackend
from ..layers.cache import ImageUnavailable, LayerCache
from ..settings import NodeAgentSettings

log = get_logger(__name__)

ExitListener = Callable[[str, ExitReason, Usage], Awaitable[None] | None]


class SandboxCreateError(CorralError):
    """create() failed; `reason` is what the sandbox's failed state should say."""

    status_code = 500
    code = "start_failed"

    def __init__(self, message: str, reason: FailureReason, **kw: Any):
        super().__init__(message, code=str(reason), **kw)
        self.reason = reason


@dataclass
class _Entry:
    spec: SandboxSpec
    layers: list[dict[str, Any]] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    error: BaseException | None = None


class SandboxManager:
    def __init__(self, backend: SandboxBackend, layers: LayerCache, *, max_sandboxes: int = 1000):
        self.backend = backend
        self.layers = layers
        self.max_sandboxes = max_sandboxes
        self._entries: dict[str, _Entry] = {}
        self._listeners: list[ExitListener] = []
        backend.on_exit = self._backend_exit
        layers.add_fault_listener(self._layer_fault)

    def on_exit(self, listener: ExitListener) -> None:
        """Register listener(sandbox_id, reason, usage) for sandboxes that ended on their own
        (init exited / OOM / timeout_s). Resources are already released when it runs."""
        self._listeners.append(listener)

    async def start(self, adopt: bool = False) -> list[str]:
        """Call once at agent start: clear what a previous run left behind. With ``adopt``
        the sandboxes whose processes still run are taken over (returned) instead of
        deleted; the caller reconciles them with the sandbox records."""
        self.layers.cleanup_orphans()
        adopted = await self.backend.cleanup_orphans(adopt=adopt)
        for sid in adopted:
            # Their layer mounts live on inside the containers' own mount namespaces, not in
            # ours: nothing is acquired here, so nothing is released when they end.
            entry = _Entry(spec=self.backend.spec_of(sid))
            entry.ready.set()
            self._entries[sid] = entry
        return adopted

    def is_paused(self, sandbox_id: str) -> bool:
        return self.backend.is_paused(sandbox_id)

    async def close(self) -> None:
        """Agent shutdown: delete every sandbox (no re-adoption yet), drop layer mounts."""
        for sid in list(self._entries):
            await self.delete(sid)
        await self.backend.close()
        await self.layers.aclose()

    # ---- lifecycle ----------------------------------------------------------------------

    async def create(self, sandbox_id: str, spec: SandboxSpec) -> None:
        existing = self._entries.get(sandbox_id)
        if existing is not None:
            # Redelivered create (at-least-once events): wait for the first one's outcome.
            await existing.ready.wait()
            if existing.error is not None:
                raise existing.error
            return
        if len(self._entries) >= self.max_sandboxes:
            raise ServiceUnavailable(f"node is full ({self.max_sandboxes} sandboxes)")
        entry = _Entry(spec=spec)
        self._entries[sandbox_id] = entry
        try:
            try:
                layers = await self.layers.resolve_environment(spec.environment)
                mounts = await self.layers.acquire(layers)
            except ImageUnavailable as exc:
                raise SandboxCreateError(exc.message, FailureReason.image_unavailable) from exc
            entry.layers = layers
            try:
                # image-service lists base first; overlay wants the top layer first.
                await self.backend.start(sandbox_id, spec, list(reversed(mounts)))
            except Exception as exc:
                await self.layers.release(layers)
                entry.layers = []
                msg = exc.message if isinstance(exc, CorralError) else str(exc)
                raise SandboxCreateError(msg, FailureReason.start_failed) from exc
        except BaseException as exc:
            entry.error = exc
            self._entries.pop(sandbox_id, None)
            raise
        finally:
            entry.ready.set()

    async def delete(self, sandbox_id: str) -> Usage:
        """Stop and release everything; idempotent."""
        entry = self._entries.get(sandbox_id)
        if entry is not None:
            await entry.ready.wait()
        usage = await self.backend.stop(sandbox_id)
        entry = self._entries.pop(sandbox_id, None)
        if entry is not None and entry.layers:
            await self.layers.release(entry.layers)
        return usage

    def _layer_fault(self, digest: str, error: str) -> None:
        """A layer's chunks cannot be fetched any more: a sandbox on it would see EIO on its
        next uncached read, so end every sandbox using it as failed(image_unavailable)."""
        for sandbox_id, entry in list(self._entries.items()):
            if any(layer.get("digest") == digest for layer in entry.layers):
                log.warning("sandbox.image_unavailable", sandbox_id=sandbox_id, digest=digest, error=error)
                asyncio.ensure_future(self._end_for_image_fault(sandbox_id))

    async def _end_for_image_fault(self, sandbox_id: str) -> None:
        if sandbox_id not in self._entries:
            return  # deleted meanwhile
        usage = await self.backend.stop(sandbox_id)
        await self._backend_exit(sandbox_id, ExitReason.image_unavailable, usage)

    async def _backend_exit(self, sandbox_id: str, reason: ExitReason, usage: Usage) -> None:
        entry = self._entries.pop(sandbox_id, None)
        if entry is not None and entry.layers:
            await self.layers.release(entry.layers)
        for listener in list(self._listeners):
            try:
                res = listener(sandbox_id, reason, usage)
                if asyncio.iscoroutine(res):
                    await res
            except Exception:
                log.exception("exit_listener_failed", sandbox_id=sandbox_id)

    # ---- inventory ----------------------------------------------------------------------

    def count(self) -> int:
        return len(self._entries)

    def ids(self) -> list[str]:
        return list(self._entries)

    def spec(self, sandbox_id: str) -> SandboxSpec:
        return self._require(sandbox_id).spec

    def used_capacity(self) -> dict[str, float]:
        specs = [e.spec for e in self._entries.values()]
        return {"sandboxes": len(specs), "cpu": sum(s.cpu for s in specs),
                "memory_mb": sum(s.memory_mb for s in specs), "disk_mb": sum(s.disk_mb for s in specs)}

    def usage(self, sandbox_id: str) -> Usage:
        self._require(sandbox_id)
        return self.backend.usage(sandbox_id)

    def _require(self, sandbox_id: str) -> _Entry:
        entry = self._entries.get(sandbox_id)
        if entry is None or not entry.ready.is_set():
            raise NotFound(f"sandbox {sandbox_id} not found on this node", loc=["path", "sandbox_id"])
        return entry

    async def pause(self, sandbox_id: str) -> None:
        self._require(sandbox_id)
        await self.backend.pause(sandbox_id)

    async def resume(self, sandbox_id: str) -> None:
        self._require(sandbox_id)
        await self.backend.resume(sandbox_id)

    # ---- data path ----------------------------------------------------------------------

    async def exec(self, sandbox_id: str, req: ExecRequest) -> ExecResult:
        self._require(sandbox_id)
        return await self.backend.exec(sandbox_id, req)

    def exec_stream(self, sandbox_id: str, req: ExecRequest) -> AsyncIterator[ExecChunk]:
        self._require(sandbox_id)
        return self.backend.exec_stream(sandbox_id, req)

    async def write_file(self, sandbox_id: str, path: str, data: FileData, mode: int = 0o644) -> int:
        self._require(sandbox_id)
        return await self.backend.write_file(sandbox_id, path, data, mode)

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        self._require(sandbox_id)
        return await self.backend.read_file(sandbox_id, path)

    async def open_file(self, sandbox_id: str, path: str) -> tuple[int, AsyncIterator[bytes]]:
        self._require(sandbox_id)
        return await self.backend.open_file(sandbox_id, path)

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        self._require(sandbox_id)
        return await self.backend.stat(sandbox_id, path)

    async def list_dir(self, sandbox_id: str, path: str) -> list[FileInfo]:
        self._require(sandbox_id)
        return await self.backend.list_dir(sandbox_id, path)


def build_manager(settings: NodeAgentSettings) -> SandboxManager:
    """The production wiring: crun containers + layers from image-service. Call inside the
    event loop, after host.enter_private_mount_namespace(), then `await manager.start()`."""
    from ..backends.container import ContainerBackend

    layers = LayerCache(settings.state_dir, settings.image_service_url, internal_token=settings.internal_token)
    return SandboxManager(ContainerBackend(settings), layers, max_sandboxes=settings.max_sandboxes)
