"""SandboxManager: what the node-agent does with sandboxes, independent of transport.

The app (HTTP + AMQP events, wired elsewhere) calls create/delete and the data-path
methods; it learns about sandboxes that ended on their own through on_exit callbacks.

One manager drives several backends, one per sandbox kind (``container`` always;
``microvm`` and ``vm`` where QEMU is available). A sandbox's kind is ``spec.backend``
(already resolved from ``auto`` by the spec). A backend's ``start`` gets a ``RootFs``
whose layers (top first) are in the backend's ``layer_format`` (rootfs.py assembles it).

Everything acquired for a sandbox is released once, when it is deleted or ends on its own; a
restarted agent acquires an adopted sandbox's layers again (named in its owner record).
So is its owner record (owners.py: who it belongs to, kept on the node's disk from before it
starts until it is gone).

Optional operations (pause, screen, snapshots, adoption) are asked of a backend only when it
lists the capability; otherwise the answer is ``Unsupported``, whichever backend it is.

The manager is split by responsibility: registry.py (the entries, which backend runs each,
inventory and capacity), operations.py (the data path and capability operations routed to a
sandbox's backend), rootfs.py (layers in and out of the layer cache), commits.py (a commit end
to end), and here the lifecycle.
"""

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import cast

from corral_common.contracts.images import ResolvedImage
from corral_common.contracts.sandboxes import (
    DEFAULT_VM_MEMORY_OVERHEAD_MB,
    BackendKind,
    RuntimeInfo,
    SandboxSpec,
    Usage,
)
from corral_common.logging import get_logger
from corral_host.cgroups.detect import cgroup_driver
from corral_node_agent.backends.base import Capability, ExitReason, SandboxBackend
from corral_node_agent.errors import NodeAgentError, NotFound, StartFailed, Unavailable
from corral_node_agent.layers.cache import LayerCache
from corral_node_agent.memory.accounting import MemoryAccounting
from corral_node_agent.sandboxes.commits import LayerUploads
from corral_node_agent.sandboxes.entry import SandboxEntry
from corral_node_agent.sandboxes.operations import SandboxOperations
from corral_node_agent.sandboxes.owners import OwnerRecord, OwnerRecords
from corral_node_agent.sandboxes.rootfs import RootfsAssembler
from corral_node_agent.sandboxes.warm_pool import WarmPool
from corral_node_agent.settings import NodeAgentSettings

log = get_logger(__name__)

ExitListener = Callable[[str, ExitReason, Usage], Awaitable[None] | None]


class SandboxManager(SandboxOperations):
    """Lifecycle: create (from the warm pool or started), delete, ends on their own, adoption
    at agent start, shutdown. Inventory (registry.py) and what is asked of a running sandbox
    (operations.py) are inherited."""

    def __init__(self, backends: SandboxBackend | dict[str, SandboxBackend], layers: LayerCache, *,
                 max_sandboxes: int = 0, vm_memory_overhead_mb: int = DEFAULT_VM_MEMORY_OVERHEAD_MB,
                 owners: OwnerRecords | None = None, uploads: LayerUploads | None = None,
                 memory: MemoryAccounting | None = None, warm_pool_size: int = 0, warm_pool_idle_s: float = 600.0,
                 warm_pool_max: int = 0):
        super().__init__(backends if isinstance(backends, dict) else {"container": backends},
                         max_sandboxes=max_sandboxes, vm_memory_overhead_mb=vm_memory_overhead_mb, memory=memory)
        self.uploads = uploads
        self.layers = layers
        self.rootfs = RootfsAssembler(layers)
        self.owners = owners
        self._listeners: list[ExitListener] = []
        for backend in self.backends.values():
            backend.on_exit = self._backend_exit
        layers.add_fault_listener(self._layer_fault)
        if memory is not None:
            memory.cgroup_name = self.runtime_id
        # Creates being started now; the warm pool fills only while there are none.
        self._creating = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        if max(warm_pool_size, warm_pool_max) > 0 and Capability.warm_pool in self.backend.capabilities:
            self.pool = WarmPool(self.backend, size=warm_pool_size, idle_s=warm_pool_idle_s, max_size=warm_pool_max,
                                 new_entry=lambda spec, tenant, pinned: SandboxEntry(
                                     spec=spec, tenant=tenant, pinned=pinned, layer_format=self.backend.layer_format),
                                 acquire=self.rootfs.acquire, release=self.rootfs.release, quiet=self._until_quiet,
                                 room=self._room, fits=lambda spec: not self._over_capacity(spec),
                                 records=OwnerRecords(f"{owners.directory}/pooled") if owners is not None else None)

    def on_exit(self, listener: ExitListener) -> None:
        """Register listener(sandbox_id, reason, usage) for sandboxes that ended on their own
        (init exited / OOM / timeout_s). Resources are already released when it runs (its
        owner record is not: it goes once every listener returned)."""
        self._listeners.append(listener)

    async def start(self, adopt: bool = False) -> list[str]:
        """Call once at agent start: clear what a previous run left behind. With ``adopt``
        the sandboxes whose processes still run are taken over (returned) instead of
        deleted; the caller reconciles them with the sandbox records."""
        self.layers.cleanup_orphans()
        adopted_all: list[str] = []
        lost: list[str] = []
        records = self.pool.records if self.pool is not None else None
        pooled = records.ids() if records is not None else set()
        for kind, backend in self.backends.items():
            adopted = await backend.cleanup_orphans(adopt=adopt and Capability.adopt in backend.capabilities,
                                                    pooled=pooled if backend is self.backend else ())
            ended: set[str] = set()
            for sid in adopted:
                if sid in pooled:
                    await self._repool(sid, records.get(sid))
                    continue
                owner = self.owners.get(sid) if self.owners is not None else None
                try:
                    spec, runtime = backend.spec_of(sid), backend.describe(sid)
                except NotFound:
                    # Its init exited while the ones before it were taken over (the awaits
                    # above): the backend reported that end like any other; not adopted.
                    ended.add(sid)
                    continue
                entry = SandboxEntry(spec=spec, kind=kind, tenant=owner.tenant if owner else "",
                               layer_format=backend.layer_format)
                entry.runtime = runtime
                entry.ready.set()
                self._put(sid, entry)
                if owner is not None and owner.layers and await self.rootfs.hold_adopted(sid, entry, owner.layers):
                    lost.append(sid)
            adopted_all += [sid for sid in adopted if sid not in pooled and sid not in ended]
        if self.owners is not None:
            self.owners.prune(set(adopted_all))
        if self.pool is not None:
            if records is not None:
                records.prune({a.runtime_id for shape in self.pool.shapes() for a in shape.ready})
            self.pool.start()
        for sid in lost:
            asyncio.ensure_future(self._end_for_image_fault(sid))  # as a layer fault while it ran would
        return adopted_all

    async def _repool(self, runtime_id: str, record: OwnerRecord | None) -> None:
        """A sandbox started ahead by the previous agent run and never claimed: back into the
        pool, holding its layers again; stopped when it cannot be (no record, its layers lost
        or no longer held, or the pool is full of its shape)."""
        entry = SandboxEntry(spec=self.backend.spec_of(runtime_id), tenant=record.tenant if record else "",
                       layer_format=self.backend.layer_format)
        if record is not None and record.layers:
            lost = await self.rootfs.hold_adopted(runtime_id, entry, record.layers)
            held = bool(entry.layers)
            if held and not lost and self.pool.adopt(runtime_id, record, entry):
                log.info("warm_pool.adopted", runtime_id=runtime_id)
                return
        await self.backend.stop(runtime_id)
        await self.rootfs.release(entry)

    async def stop_pool(self) -> None:
        """Stop the warm pool and every sandbox in it (an agent that stops keeps its sandboxes
        running for the next run to adopt, not its pool)."""
        if self.pool is not None:
            await self.pool.close()

    async def close(self) -> None:
        """Delete every sandbox and stop the pool, drop layer mounts (tests, cleanup)."""
        await self.stop_pool()
        for sid in list(self._entries):
            await self.delete(sid)
        for backend in self.backends.values():
            await backend.close()
        await self.layers.aclose()
        if self.uploads is not None:
            await self.uploads.aclose()

    # ---- lifecycle ----------------------------------------------------------------------

    async def create(self, sandbox_id: str, spec: SandboxSpec, owner: OwnerRecord | None = None,
                     image: ResolvedImage | None = None) -> None:
        """Start a sandbox; ``owner`` is recorded on the node's disk before it runs; ``image``:
        its environment as the api resolved it (the record's pin), which it starts on."""
        existing = self._entries.get(sandbox_id)
        if existing is not None:
            # Redelivered create (at-least-once events): wait for the first one's outcome.
            await existing.ready.wait()
            if existing.error is not None:
                raise existing.error
            return
        if self.max_sandboxes and len(self._entries) >= self.max_sandboxes:
            # Nothing was made for it yet: the caller fails it (start_failed, with this reason).
            raise Unavailable(f"node is full: it runs {self.max_sandboxes} sandboxes, its max_sandboxes")
        backend = self.backends.get(spec.backend)
        if backend is None:
            # The scheduler only sends a kind a node advertises; this is a stale placement.
            raise StartFailed(f"this node has no {spec.backend} backend")
        entry = SandboxEntry(spec=spec, tenant=owner.tenant if owner is not None else "", kind=spec.backend,
                       pinned=image.layers if image is not None and spec.environment else None,
                       layer_format=backend.layer_format)
        self._put(sandbox_id, entry)
        self._creating += 1
        self._quiet.clear()
        try:
            if entry.pinned is None and spec.environment:
                entry.pinned = await self.rootfs.resolve_unpinned(entry)
            if self.pool is not None and not self.pool.has_ready(spec, entry.tenant, entry.pinned):
                # The pool held the node's last slot, or requests the scheduler counted free for
                # this create, and none of this shape: pooled ones give way until it fits.
                while (self._room() < 0 or self._over_capacity()) and await self.pool.make_room():
                    pass
            if owner is not None and self.owners is not None:
                self.owners.write(owner)
            if not await self._claim_ahead(sandbox_id, entry, backend):
                rootfs = await self.rootfs.acquire(entry)
                try:
                    # A from_snapshot spec starts like any other: the backend restores the saved
                    # state on top of the same layers.
                    await backend.start(sandbox_id, spec, rootfs)
                except Exception as exc:
                    await self.rootfs.release(entry)
                    msg = exc.message if isinstance(exc, NodeAgentError) else str(exc)
                    raise StartFailed(msg) from exc
            if entry.layers and owner is not None and self.owners is not None:
                # What it runs on, for an agent that adopts it after a restart.
                self.owners.write(dataclasses.replace(owner, layers=tuple(entry.layers)))
            try:
                entry.runtime = cast(RuntimeInfo, {str(k): str(v) for k, v in backend.describe(sandbox_id).items()})
            except Exception:
                log.exception("sandbox.describe_failed", sandbox_id=sandbox_id)
        except BaseException as exc:
            entry.error = exc
            self._pop(sandbox_id)
            self._forget_owner(sandbox_id)
            raise
        finally:
            entry.ready.set()
            self._creating -= 1
            if not self._creating:
                self._quiet.set()

    async def _claim_ahead(self, sandbox_id: str, entry: SandboxEntry, backend: SandboxBackend) -> bool:
        """Serve the create from the warm pool when a sandbox of its shape is ready there
        (False: start it as usual)."""
        if self.pool is None or backend is not self.backend:
            return False
        while (ahead := self.pool.take(entry.spec, entry.tenant, entry.pinned)) is not None:
            try:
                # It must run on the layers this create starts on (its shape names their digests;
                # checked again: the pool's layers are what it holds, the shape what it was asked).
                if [layer.digest for layer in entry.pinned or ()] != [layer.digest for layer in ahead.entry.layers]:
                    raise NotFound("its environment has other layers now")
                await backend.claim(ahead.runtime_id, sandbox_id, entry.spec)
            except (NodeAgentError, OSError) as exc:
                log.info("warm_pool.not_claimed", runtime_id=ahead.runtime_id, error=str(exc))
                await self.pool.discard(ahead)
                if isinstance(exc, NotFound):
                    continue  # it ended meanwhile, or is stale: maybe another one is ready
                return False  # the usual path says what is wrong
            self.pool.claimed(ahead)
            entry.layers, ahead.entry.layers = ahead.entry.layers, ()
            return True
        return False

    async def _until_quiet(self, poll_s: float = 0.02, patience_s: float = 2.0) -> None:
        """Until no create is being started and no exec or file call runs on the node, the
        moment the warm pool starts a container ahead: refilling right after a burst would take
        the cpu from the execs in the sandboxes just claimed. Calls that never stop (a node
        always busy) hold it back ``patience_s`` at most; creates always do."""
        waited = 0.0
        while True:
            await self._quiet.wait()
            if waited >= patience_s or not self.activity.in_flight():
                return
            await asyncio.sleep(poll_s)
            waited += poll_s

    async def delete(self, sandbox_id: str) -> Usage:
        """Stop and release everything; idempotent."""
        entry = self._entries.get(sandbox_id)
        if entry is not None:
            await entry.ready.wait()
        usage = self._close_memory_account(sandbox_id, await self._backend_of(sandbox_id).stop(sandbox_id))
        await self._drop_entry(sandbox_id)
        self._forget_owner(sandbox_id)
        return usage

    async def _drop_entry(self, sandbox_id: str) -> None:
        """A sandbox is gone: release what it held; its slot may go to the warm pool again."""
        entry = self._pop(sandbox_id)
        if entry is not None:
            await self.rootfs.release(entry)
            if self.pool is not None:
                self.pool.slot_freed()

    def _close_memory_account(self, sandbox_id: str, usage: Usage) -> Usage:
        return self.memory.close_account(sandbox_id, usage) if self.memory is not None else usage

    def sample_memory(self) -> None:
        """One accounting pass over every running sandbox (blocking reads: call in a thread)."""
        if self.memory is not None:
            live = self.live_ids()
            self.memory.sample(live)
            self.memory.prune(set(self._entries))

    def _forget_owner(self, sandbox_id: str) -> None:
        if self.owners is not None:
            self.owners.remove(sandbox_id)

    def _layer_fault(self, digest: str, error: str) -> None:
        """A layer's chunks cannot be fetched any more: a sandbox on it would see EIO on its
        next uncached read, so end every sandbox using it as failed(image_unavailable)."""
        for sandbox_id, entry in list(self._entries.items()):
            if any(layer.digest == digest for layer in entry.layers):
                log.warning("sandbox.image_unavailable", sandbox_id=sandbox_id, digest=digest, error=error)
                asyncio.ensure_future(self._end_for_image_fault(sandbox_id))

    async def _end_for_image_fault(self, sandbox_id: str) -> None:
        if sandbox_id not in self._entries:
            return  # deleted meanwhile
        usage = await self._backend_of(sandbox_id).stop(sandbox_id)
        await self._backend_exit(sandbox_id, ExitReason.image_unavailable, usage)

    async def _backend_exit(self, sandbox_id: str, reason: ExitReason, usage: Usage) -> None:
        if self.pool is not None and self.pool.owns(sandbox_id):
            await self.pool.ended(sandbox_id)  # started ahead, never a sandbox: nobody to tell
            return
        usage = self._close_memory_account(sandbox_id, usage)
        await self._drop_entry(sandbox_id)
        for listener in list(self._listeners):
            try:
                res = listener(sandbox_id, reason, usage)
                if asyncio.iscoroutine(res):
                    await res
            except Exception:
                log.exception("sandbox.exit_listener_failed", sandbox_id=sandbox_id)
        self._forget_owner(sandbox_id)  # after the listeners: reporting the end may need it


def build_backends(settings: NodeAgentSettings) -> dict[str, SandboxBackend]:
    """crun containers always; QEMU microVMs and VMs where QEMU is installed."""
    from corral_node_agent.backends.container import ContainerBackend
    from corral_node_agent.backends.vm.backend import FullVmBackend, MicroVmBackend, qemu_available

    backends: dict[str, SandboxBackend] = {BackendKind.container: ContainerBackend(settings)}
    if qemu_available(settings):
        backends[BackendKind.microvm] = MicroVmBackend(settings)
        backends[BackendKind.vm] = FullVmBackend(settings)
    return backends


def build_manager(settings: NodeAgentSettings, backends: SandboxBackend | None = None) -> SandboxManager:
    """The production wiring: every backend this host supports (or ``backends``: tests give a
    FakeBackend) + layers from image-service. Call inside the event loop, after
    host.enter_private_mount_namespace(), then `await manager.start()`."""
    layers = LayerCache(settings.layers())
    driver = cgroup_driver()
    memory = MemoryAccounting(driver, settings.node_id) if driver.available() else None
    return SandboxManager(backends or build_backends(settings), layers, max_sandboxes=settings.max_sandboxes,
                          vm_memory_overhead_mb=settings.vm.memory_overhead_mb,
                          owners=OwnerRecords(f"{settings.state_dir}/owners"),
                          uploads=LayerUploads(settings.image_service_url, settings.internal_token,
                                               f"{settings.state_dir}/commits"), memory=memory,
                          warm_pool_size=settings.warm_pool.size, warm_pool_idle_s=settings.warm_pool.idle_s,
                          warm_pool_max=settings.warm_pool.max)
