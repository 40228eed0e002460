"""The sandboxes a node-agent has, and the backend each one runs on: the registry every part
of ``SandboxManager`` shares (operations.py asks backends through it, service.py adds and
removes entries). Safe to read off the event loop where a method says so."""

from corral_common.contracts.sandboxes import VM_BACKENDS, SandboxSpec, Usage, reserved_memory_mb
from corral_node_agent.backends.base import Capability, SandboxBackend
from corral_node_agent.disks.pressure import OpenDisk
from corral_node_agent.errors import NotFound
from corral_node_agent.memory.accounting import MemoryAccounting
from corral_node_agent.sandboxes.activity import ActivityTracker
from corral_node_agent.sandboxes.entry import SandboxEntry
from corral_node_agent.sandboxes.warm_pool import WarmPool


class SandboxRegistry:
    def __init__(self, backends: dict[str, SandboxBackend], *, max_sandboxes: int, vm_memory_overhead_mb: int,
                 memory: MemoryAccounting | None):
        self.backends = backends
        # 0: no count of its own (the agent sets its capacity's: NodeCapacity.max_sandboxes).
        self.max_sandboxes = max_sandboxes
        self.vm_memory_overhead_mb = vm_memory_overhead_mb
        # Working set and memory·time of every sandbox (None: no cgroups here, nothing sampled).
        self.memory = memory
        self._entries: dict[str, SandboxEntry] = {}
        # The cpu, memory_mb and pids the entries request, kept as they come and go (_put,
        # _pop): the create path compares them with requests_cap without a pass over thousands.
        self._requested: tuple[float, int, int] = (0.0, 0, 0)
        # Data-path use of each sandbox (GET /v1/activity: the memory-manager's idle rule).
        self.activity = ActivityTracker()
        self.pool: WarmPool | None = None
        # What the node advertises (cpu, memory_mb, pids; the agent sets its capacity's): the
        # warm pool holds only what its sandboxes leave of it (None: no bound but the slots).
        self.requests_cap: tuple[float, int, int] | None = None

    @property
    def backend(self) -> SandboxBackend:
        """The container backend (every node has one)."""
        return self.backends["container"]

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

    def runtime(self, sandbox_id: str) -> dict[str, str]:
        """How the sandbox runs (its backend's describe(), taken after start)."""
        entry = self._entries.get(sandbox_id)  # may have ended meanwhile: then nothing to say
        return {"backend": entry.kind, **entry.runtime} if entry is not None else {}

    def open_disks(self) -> list[OpenDisk]:
        """Its running sandboxes' disks (disks/pressure.py), every backend's."""
        return [d for backend in self.backends.values() for d in backend.open_disks()]

    def disk_limit_bytes(self) -> int:
        return sum(backend.disk_limit_bytes() for backend in self.backends.values())

    def used_capacity(self) -> dict[str, float]:
        specs = [e.spec for e in self._entries.values()]
        # What their requests reserve (the scheduler counts the same), not their limits.
        held = [e.spec.reservation for e in self._entries.values()]
        memory = sum(reserved_memory_mb(s.backend, s.reservation.memory_mb, self.vm_memory_overhead_mb) for s in specs)
        # (Not the warm pool's: nobody reserved them, and what the node advertises as free
        # must not count them as room a second time; capacity/disk.py.)
        return {"sandboxes": len(specs), "cpu": sum(r.cpu for r in held),
                "memory_mb": memory, "disk_mb": sum(r.disk_mb for r in held)}

    def usage(self, sandbox_id: str) -> Usage:
        self._require(sandbox_id)
        usage = self._backend_of(sandbox_id).usage(sandbox_id)
        return self.memory.usage(sandbox_id, usage) if self.memory is not None else usage

    def _require(self, sandbox_id: str) -> SandboxEntry:
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

    def is_paused(self, sandbox_id: str) -> bool:
        return self._backend_of(sandbox_id).is_paused(sandbox_id)

    def runtime_id(self, sandbox_id: str) -> str:
        """The name its cgroup has (its id, unless it came from the warm pool)."""
        return self._backend_of(sandbox_id).runtime_id(sandbox_id)

    def _requests_of(self, spec: SandboxSpec) -> tuple[float, int, int]:
        r = spec.reservation
        return r.cpu, reserved_memory_mb(spec.backend, r.memory_mb, self.vm_memory_overhead_mb), r.pids

    def _put(self, sandbox_id: str, entry: SandboxEntry) -> None:
        self._entries[sandbox_id] = entry
        cpu, memory_mb, pids = self._requests_of(entry.spec)
        self._requested = (self._requested[0] + cpu, self._requested[1] + memory_mb, self._requested[2] + pids)

    def _pop(self, sandbox_id: str) -> SandboxEntry | None:
        entry = self._entries.pop(sandbox_id, None)
        if entry is not None:
            cpu, memory_mb, pids = self._requests_of(entry.spec)
            self._requested = (self._requested[0] - cpu, self._requested[1] - memory_mb, self._requested[2] - pids)
        return entry

    def _over_capacity(self, extra: SandboxSpec | None = None) -> bool:
        """Whether the requests of the node's sandboxes, its warm pool's and ``extra``'s exceed
        what it advertises (requests_cap): the pool's are counted by the node only, so a create
        the scheduler placed in what the pool held finds it over and makes the pool give way."""
        if self.requests_cap is None:
            return False
        cpu, memory_mb, pids = self._requested
        for more in ([self._requests_of(extra)] if extra is not None else []) + \
                ([self.pool.held()] if self.pool is not None else []):
            cpu, memory_mb, pids = cpu + more[0], memory_mb + more[1], pids + more[2]
        cap_cpu, cap_memory_mb, cap_pids = self.requests_cap
        return cpu > cap_cpu + 1e-6 or memory_mb > cap_memory_mb or pids > cap_pids

    def _room(self) -> int:
        """Sandbox slots left on the node (max_sandboxes), pooled ones counted as taken."""
        if not self.max_sandboxes:
            return 1 << 30
        return self.max_sandboxes - len(self._entries) - (self.pool.count() if self.pool is not None else 0)
