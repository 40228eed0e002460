"""SandboxManager: what the node-agent does with sandboxes, independent of transport.

The app (HTTP + AMQP events, wired elsewhere) calls create/delete and the data-path
methods; it learns about sandboxes that ended on their own through on_exit callbacks.

One manager drives several backends, one per sandbox kind (``container`` always;
``microvm`` and ``vm`` where QEMU is available). A sandbox's kind is ``spec.backend``
(already resolved from ``auto`` by the spec). A backend's ``start`` gets a ``RootFs``
whose layers (top first) are in the backend's ``layer_format``:

- ``mounts``: mounted layer directories (``LayerCache.acquire``);
- ``files`` / ``dax_files``: layer image files (``LayerCache.acquire_files``);
- with ``spec.disk_image``, its ``boot_disk`` too (``LayerCache.acquire_disk_image``).

Everything acquired for a sandbox is released once, when it is deleted or ends on its own; a
restarted agent acquires an adopted sandbox's layers again (named in its owner record).
So is its owner record (owners.py: who it belongs to, kept on the node's disk from before it
starts until it is gone).

Optional operations (pause, screen, snapshots, adoption) are asked of a backend only when it
lists the capability; otherwise the answer is ``Unsupported``, whichever backend it is.
"""

import asyncio
import dataclasses
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from corral_common.contracts.display import InputEvent
from corral_common.contracts.exec import ExecChunk, ExecRequest, ExecResult, FileInfo
from corral_common.contracts.images import EnvironmentLayer, ResolvedImage
from corral_common.contracts.memory import BalloonState, SandboxActivity
from corral_common.contracts.network import NetworkPolicy
from corral_common.contracts.node import CommitReply, CommitRequest
from corral_common.contracts.sandboxes import (
    DEFAULT_VM_MEMORY_OVERHEAD_MB,
    VM_BACKENDS,
    BackendKind,
    FailureReason,
    RuntimeInfo,
    SandboxSpec,
    Usage,
    reserved_memory_mb,
)
from corral_common.logging import get_logger
from corral_host.cgroups.detect import cgroup_driver
from corral_node_agent.backends.base import Capability, ExitReason, FileData, SandboxBackend
from corral_node_agent.backends.types import BootDisk, DiskFormat, LayerFormat, RootFs
from corral_node_agent.errors import ImageUnavailable, NodeAgentError, NotFound, StartFailed, Unavailable, Unsupported
from corral_node_agent.layers.cache import LayerCache
from corral_node_agent.memory.accounting import MemoryAccounting
from corral_node_agent.sandboxes.activity import ActivityTracker
from corral_node_agent.sandboxes.commits import LayerUploads
from corral_node_agent.sandboxes.owners import OwnerRecord, OwnerRecords
from corral_node_agent.sandboxes.warm_pool import WarmPool
from corral_node_agent.settings import NodeAgentSettings

log = get_logger(__name__)

ExitListener = Callable[[str, ExitReason, Usage], Awaitable[None] | None]


@dataclass
class _Entry:
    spec: SandboxSpec
    # Whose environment names the spec's (a tenant's own shadow the shared catalogue's).
    tenant: str = ""
    kind: str = BackendKind.container
    # The environment's layers as the api resolved them for this create (its record's pinned
    # image): what it starts on, and part of its warm pool shape. None: no environment.
    pinned: tuple[EnvironmentLayer, ...] | None = None
    # What it holds (acquired), released when it ends.
    layers: Sequence[EnvironmentLayer] = ()
    # How the layers were acquired: release the same way.
    layer_format: LayerFormat = LayerFormat.mounts
    disk_image: str | None = None
    runtime: RuntimeInfo = field(default_factory=RuntimeInfo)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    error: BaseException | None = None


class SandboxManager:
    def __init__(self, backends: SandboxBackend | dict[str, SandboxBackend], layers: LayerCache, *,
                 max_sandboxes: int = 0, vm_memory_overhead_mb: int = DEFAULT_VM_MEMORY_OVERHEAD_MB,
                 owners: OwnerRecords | None = None, uploads: LayerUploads | None = None,
                 memory: MemoryAccounting | None = None, warm_pool_size: int = 0, warm_pool_idle_s: float = 600.0,
                 warm_pool_max: int = 0):
        self.backends = backends if isinstance(backends, dict) else {BackendKind.container: backends}
        # Where commits go (image-service); None: this manager cannot commit.
        self.uploads = uploads
        self.layers = layers
        # 0: no count of its own (the agent sets its capacity's: NodeCapacity.max_sandboxes).
        self.max_sandboxes = max_sandboxes
        self.vm_memory_overhead_mb = vm_memory_overhead_mb
        self.owners = owners
        # Working set and memory·time of every sandbox (None: no cgroups here, nothing sampled).
        self.memory = memory
        self._entries: dict[str, _Entry] = {}
        # Data-path use of each sandbox (GET /v1/activity: the memory-manager's idle rule).
        self.activity = ActivityTracker()
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
        self.pool: WarmPool | None = None
        if max(warm_pool_size, warm_pool_max) > 0 and Capability.warm_pool in self.backend.capabilities:
            self.pool = WarmPool(self.backend, size=warm_pool_size, idle_s=warm_pool_idle_s, max_size=warm_pool_max,
                                 new_entry=lambda spec, tenant, pinned: _Entry(
                                     spec=spec, tenant=tenant, pinned=pinned, layer_format=self.backend.layer_format),
                                 acquire=self._acquire, release=self._release, quiet=self._until_quiet,
                                 room=self._room,
                                 records=OwnerRecords(f"{owners.directory}/pooled") if owners is not None else None)

    @property
    def backend(self) -> SandboxBackend:
        """The container backend (every node has one)."""
        return self.backends[BackendKind.container]

    def kinds(self) -> list[str]:
        """Sandbox kinds this node runs, as advertised in its heartbeat."""
        return sorted(self.backends)

    def accelerator(self) -> str:
        """How this node's VMs run ("kvm" or "tcg"), empty without VM backends."""
        for kind in sorted(VM_BACKENDS & set(self.backends)):
            value = getattr(self.backends[kind], "accelerator", "")
            if value:
                return str(value)
        return ""

    def _backend_of(self, sandbox_id: str) -> SandboxBackend:
        entry = self._entries.get(sandbox_id)
        return self.backends.get(entry.kind, self.backend) if entry is not None else self.backend

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
                entry = _Entry(spec=spec, kind=kind, tenant=owner.tenant if owner else "",
                               layer_format=backend.layer_format)
                entry.runtime = runtime
                entry.ready.set()
                self._entries[sid] = entry
                if owner is not None and owner.layers and await self._hold_adopted_layers(sid, entry, owner.layers):
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
        entry = _Entry(spec=self.backend.spec_of(runtime_id), tenant=record.tenant if record else "",
                       layer_format=self.backend.layer_format)
        if record is not None and record.layers:
            lost = await self._hold_adopted_layers(runtime_id, entry, record.layers)
            held = bool(entry.layers)
            if held and not lost and self.pool.adopt(runtime_id, record, entry):
                log.info("warm_pool.adopted", runtime_id=runtime_id)
                return
        await self.backend.stop(runtime_id)
        await self._release(entry)

    async def _hold_adopted_layers(self, sandbox_id: str, entry: _Entry, layers: Sequence[EnvironmentLayer]) -> bool:
        """Take references on the layers an adopted sandbox runs on, as its create did: the
        cache must not evict them under it, and a lazy layer's fault must end it. (Its mounts
        live on in its own mount namespace, a VM's QEMU keeps its files open: what is acquired
        here is this agent's handle on the same layers, released when it ends.) True: some of
        them can no longer be read there (their lazy-layer server died while no agent ran). A
        layer that cannot be held is logged; the sandbox runs on, unreferenced, as before."""
        try:
            if entry.layer_format is LayerFormat.mounts:
                await self.layers.acquire(layers)
            else:
                await self.layers.acquire_files(layers, dax=entry.layer_format is LayerFormat.dax_files)
        except (ImageUnavailable, OSError) as exc:
            log.warning("sandbox.adopted_layers_unheld", sandbox_id=sandbox_id, error=str(exc))
            return False
        entry.layers = tuple(layers)
        if lost := self.layers.lazy_layers_lost(layers):
            log.warning("sandbox.image_unavailable", sandbox_id=sandbox_id, digests=lost,
                        error="its lazy-layer server exited while no agent ran")
            return True
        return False

    def is_paused(self, sandbox_id: str) -> bool:
        return self._backend_of(sandbox_id).is_paused(sandbox_id)

    async def close(self) -> None:
        """Agent shutdown: delete every sandbox (no re-adoption yet), drop layer mounts."""
        if self.pool is not None:
            await self.pool.close()
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
        entry = _Entry(spec=spec, tenant=owner.tenant if owner is not None else "", kind=spec.backend,
                       pinned=image.layers if image is not None and spec.environment else None,
                       layer_format=backend.layer_format)
        self._entries[sandbox_id] = entry
        self._creating += 1
        self._quiet.clear()
        try:
            if entry.pinned is None and spec.environment:
                entry.pinned = await self._resolve_unpinned(entry)
            if self.pool is not None and self._room() < 0 and not self.pool.has_ready(spec, entry.tenant,
                                                                                       entry.pinned):
                # The pool held the node's last slot and none of this shape: one gives way.
                await self.pool.make_room()
            if owner is not None and self.owners is not None:
                self.owners.write(owner)
            if not await self._claim_ahead(sandbox_id, entry, backend):
                rootfs = await self._acquire(entry)
                try:
                    # A from_snapshot spec starts like any other: the backend restores the saved
                    # state on top of the same layers.
                    await backend.start(sandbox_id, spec, rootfs)
                except Exception as exc:
                    await self._release(entry)
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
            self._entries.pop(sandbox_id, None)
            self._forget_owner(sandbox_id)
            raise
        finally:
            entry.ready.set()
            self._creating -= 1
            if not self._creating:
                self._quiet.set()

    async def _claim_ahead(self, sandbox_id: str, entry: _Entry, backend: SandboxBackend) -> bool:
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

    def _room(self) -> int:
        """Sandbox slots left on the node (max_sandboxes), pooled ones counted as taken."""
        if not self.max_sandboxes:
            return 1 << 30
        return self.max_sandboxes - len(self._entries) - (self.pool.count() if self.pool is not None else 0)

    def runtime_id(self, sandbox_id: str) -> str:
        """The name its cgroup has (its id, unless it came from the warm pool)."""
        return self._backend_of(sandbox_id).runtime_id(sandbox_id)

    async def _resolve_unpinned(self, entry: _Entry) -> tuple[EnvironmentLayer, ...]:
        """The environment's layers now, for a create whose record has no pinned image: it is
        pinned here, and starts (or is claimed from the warm pool) like a pinned one.
        compat(d03aa3f, 2026-12-07), only: records written before the api pinned images, restored snapshots,
        jobs queued again from SQL after Redis lost them; it can go (and the catalog's
        environment cache with it, but for fncall) once snapshot and job rows keep their pin."""
        try:
            return await self.layers.resolve_environment(entry.spec.environment, entry.tenant)
        except ImageUnavailable as exc:
            raise StartFailed(exc.message, FailureReason.image_unavailable) from exc

    async def _acquire(self, entry: _Entry) -> RootFs:
        """Layers (top first, in the form the sandbox's backend wants) and the boot disk."""
        spec = entry.spec
        lower: list[str] = []
        boot_disk = None
        try:
            if spec.environment:
                layers = entry.pinned  # (create and the warm pool pin every entry of an environment)
                if layers is None:
                    raise ImageUnavailable(f"environment {spec.environment!r} was not resolved")
                if entry.layer_format is LayerFormat.mounts:
                    acquired = await self.layers.acquire(layers)
                else:
                    acquired = await self.layers.acquire_files(layers, dax=entry.layer_format is LayerFormat.dax_files)
                entry.layers = layers
                # image-service lists base first; overlays and guests want the top layer first.
                lower = list(reversed(acquired))
            if spec.disk_image:
                path, disk_format = await self.layers.acquire_disk_image(spec.disk_image)
                entry.disk_image = spec.disk_image
                boot_disk = BootDisk(path=path, format=DiskFormat(disk_format))
        except ImageUnavailable as exc:
            await self._release(entry)
            raise StartFailed(exc.message, FailureReason.image_unavailable) from exc
        except BaseException:
            await self._release(entry)
            raise
        return RootFs(layers=lower, boot_disk=boot_disk)

    async def _release(self, entry: _Entry) -> None:
        """Give back what _acquire took; safe to call twice."""
        layers, entry.layers = entry.layers, ()
        disk_image, entry.disk_image = entry.disk_image, None
        if layers:
            if entry.layer_format is LayerFormat.mounts:
                await self.layers.release(layers)
            else:
                await self.layers.release_files(layers, dax=entry.layer_format is LayerFormat.dax_files)
        if disk_image:
            await self.layers.release_disk_image(disk_image)

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
        entry = self._entries.pop(sandbox_id, None)
        if entry is not None:
            await self._release(entry)
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

    # ---- inventory ----------------------------------------------------------------------

    def count(self) -> int:
        return len(self._entries)

    def ids(self) -> list[str]:
        return list(self._entries)

    def live_ids(self) -> list[str]:
        """The sandboxes that run (started, not ended). Safe off the event loop (the memory
        sampler's thread): the entries, which change on the loop, are copied in one call
        under the GIL, never iterated live (at 10,000 a pass lost that race)."""
        return [sid for sid in list(self._entries) if self.is_live(sid)]

    def inventory(self) -> list[tuple[str, str]]:
        """(state, backend) of every sandbox here: starting (not up yet), running, paused, failed (start failed, not
        removed yet)."""
        out = []
        for sid, entry in list(self._entries.items()):
            if entry.error is not None:
                state = "failed"
            elif not entry.ready.is_set():
                state = "starting"
            else:
                state = "paused" if self.is_paused(sid) else "running"
            out.append((state, entry.kind))
        return out

    def is_live(self, sandbox_id: str) -> bool:
        entry = self._entries.get(sandbox_id)
        return entry is not None and entry.ready.is_set() and entry.error is None

    def spec(self, sandbox_id: str) -> SandboxSpec:
        return self._require(sandbox_id).spec

    def runtime(self, sandbox_id: str) -> RuntimeInfo:
        """How the sandbox runs (its backend's describe(), taken after start)."""
        entry = self._entries.get(sandbox_id)  # may have ended meanwhile: then nothing to say
        return {"backend": entry.kind, **entry.runtime} if entry is not None else {}

    def used_capacity(self) -> dict[str, float]:
        specs = [e.spec for e in self._entries.values()]
        # What their requests reserve (the scheduler counts the same), not their limits.
        held = [e.spec.reservation for e in self._entries.values()]
        memory = sum(reserved_memory_mb(s.backend, s.reservation.memory_mb, self.vm_memory_overhead_mb) for s in specs)
        pooled_disk_mb = self.pool.disk_mb() if self.pool is not None else 0
        return {"sandboxes": len(specs), "cpu": sum(r.cpu for r in held),
                "memory_mb": memory, "disk_mb": sum(r.disk_mb for r in held) + pooled_disk_mb}

    def usage(self, sandbox_id: str) -> Usage:
        self._require(sandbox_id)
        usage = self._backend_of(sandbox_id).usage(sandbox_id)
        return self.memory.usage(sandbox_id, usage) if self.memory is not None else usage

    def _require(self, sandbox_id: str) -> _Entry:
        entry = self._entries.get(sandbox_id)
        if entry is None or not entry.ready.is_set():
            raise NotFound(f"sandbox {sandbox_id} not found on this node", loc=["path", "sandbox_id"])
        return entry

    def _capable(self, sandbox_id: str, capability: Capability) -> SandboxBackend:
        """The sandbox's backend, which must list capability (Unsupported otherwise)."""
        self._require(sandbox_id)
        backend = self._backend_of(sandbox_id)
        if capability not in backend.capabilities:
            raise backend.unsupported(capability)
        return backend

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
        """The sandbox's writable layer as a new ``diff`` layer in image-service (``request``:
        name, version, owner, quota_bytes); returns image-service's layer and status."""
        backend = self._capable(sandbox_id, Capability.commit)
        if self.uploads is None:
            raise Unsupported("this node cannot commit (no image-service uploads configured)")
        path = self.uploads.spool_path()
        try:
            await backend.commit_diff(sandbox_id, path)
            return await self.uploads.upload_diff(path, request)
        finally:
            await asyncio.to_thread(os.unlink, path)

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
                          vm_memory_overhead_mb=settings.vm_memory_overhead_mb,
                          owners=OwnerRecords(f"{settings.state_dir}/owners"),
                          uploads=LayerUploads(settings.image_service_url, settings.internal_token,
                                               f"{settings.state_dir}/commits"), memory=memory,
                          warm_pool_size=settings.warm_pool_size, warm_pool_idle_s=settings.warm_pool_idle_s,
                          warm_pool_max=settings.warm_pool_max)
