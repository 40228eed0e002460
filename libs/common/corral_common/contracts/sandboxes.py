"""The sandbox vocabulary every service shares: the request spec, states and transitions."""

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from corral_common.contracts.network import Network
from corral_common.inputs import env_names

LABEL_KEY_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.\-/]{0,62}[A-Za-z0-9])?$"


class SandboxState(StrEnum):
    pending = "pending"
    scheduled = "scheduled"
    starting = "starting"
    running = "running"
    paused = "paused"
    stopping = "stopping"
    terminated = "terminated"
    failed = "failed"


TERMINAL_STATES = frozenset({SandboxState.terminated, SandboxState.failed})

# Which state may follow which. Anything may fail; terminal states are final.
ALLOWED_TRANSITIONS: dict[SandboxState, frozenset[SandboxState]] = {
    SandboxState.pending: frozenset({SandboxState.scheduled, SandboxState.stopping, SandboxState.terminated,
                                     SandboxState.failed}),
    SandboxState.scheduled: frozenset({SandboxState.starting, SandboxState.stopping, SandboxState.terminated,
                                       SandboxState.failed}),
    SandboxState.starting: frozenset({SandboxState.running, SandboxState.stopping, SandboxState.failed}),
    SandboxState.running: frozenset({SandboxState.paused, SandboxState.stopping, SandboxState.failed}),
    SandboxState.paused: frozenset({SandboxState.running, SandboxState.stopping, SandboxState.failed}),
    SandboxState.stopping: frozenset({SandboxState.terminated, SandboxState.failed}),
    SandboxState.terminated: frozenset(),
    SandboxState.failed: frozenset(),
}


def can_transition(current: SandboxState | str, target: SandboxState | str) -> bool:
    return SandboxState(target) in ALLOWED_TRANSITIONS[SandboxState(current)]


class FailureReason(StrEnum):
    node_lost = "node_lost"
    lost_on_restart = "lost_on_restart"  # its node-agent restarted and its processes were gone
    oom_killed = "oom_killed"
    exited = "exited"
    start_failed = "start_failed"
    image_unavailable = "image_unavailable"
    guest_panic = "guest_panic"  # a VM's kernel panicked or reset itself
    guest_unresponsive = "guest_unresponsive"  # a VM's guest agent stopped answering
    unschedulable = "unschedulable"
    # The one node allowed to take it (where its snapshot lives) is gone.
    required_node_unavailable = "required_node_unavailable"


class BackendKind(StrEnum):
    """The kinds of sandbox a node runs (a node-agent backend each). Members are the strings on
    the wire (``SandboxSpec.backend``, a heartbeat's ``backends``, a record's ``runtime``), so
    they compare equal to them; the spec's fields stay ``Literal`` types, as the public schema
    names them."""

    container = "container"
    microvm = "microvm"
    vm = "vm"


# What a request may ask for: a kind, or "auto" (resolve_backend picks one).
Backend = Literal["auto", "container", "microvm", "vm"]
ConcreteBackend = Literal["container", "microvm", "vm"]
VM_BACKENDS = frozenset({BackendKind.microvm, BackendKind.vm})
# Host memory a VM costs beyond its guest RAM (QEMU itself, TCG translation cache). A node
# advertises its own figure in its heartbeat; this is the default on both sides.
DEFAULT_VM_MEMORY_OVERHEAD_MB = 128


def reserved_memory_mb(backend: str, memory_mb: int, vm_overhead_mb: int = DEFAULT_VM_MEMORY_OVERHEAD_MB) -> int:
    """Host memory a sandbox's memory request (``memory_mb``) takes from its node: the
    scheduler reserves this much and the node-agent counts it as used, so both agree on how
    full a node is."""
    return memory_mb + (vm_overhead_mb if backend in VM_BACKENDS else 0)


# A VM's cgroup holds QEMU, whose own threads (I/O workers, vCPUs, RCU...) count against
# its pids limit; the guest's processes do not (they are the guest kernel's).
VM_PIDS_LIMIT = 512
# The smallest pids_limit a sandbox may ask for.
MIN_PIDS_LIMIT = 8
# The smallest pids request (Requests.pids): a node whose pids claim is P never holds more than
# P // MIN_PIDS_REQUEST sandboxes, whatever their kind.
MIN_PIDS_REQUEST = 1


def pids_max(backend: str, pids_limit: int) -> int:
    """Host tasks (processes + threads) a sandbox may hold: its cgroup's pids.max. What it
    reserves on its node is its pids request; the node's own pids cap is the backstop."""
    return VM_PIDS_LIMIT if backend in VM_BACKENDS else pids_limit


class Requests(BaseModel):
    """What placement counts for a sandbox (Kubernetes' requests): the scheduler reserves these
    on a node, and the node's measured use keeps it honest (docs/architecture.md, "Capacity").
    The spec's cpu, memory_mb, disk_mb and pids_limit are its limits, which the node enforces;
    a request is at most its limit. Unset, each is the default for the sandbox's kind
    (``default_requests``), never above the limit."""

    model_config = ConfigDict(extra="forbid")  # a misspelt request is refused, not ignored

    cpu: float | None = Field(None, gt=0, le=64, description="CPU cores placement counts (default: 0.001)")
    memory_mb: int | None = Field(None, ge=1, le=262144,
                                  description="MiB placement counts (default: 2 for containers, memory_mb for VMs)")
    disk_mb: int | None = Field(None, ge=1, le=1048576, description="MiB of disk placement counts (default: 4)")
    pids: int | None = Field(None, ge=1, le=65536, description="Tasks placement counts (default: 2; 32 for VMs)")


# What an idle sandbox of each kind really uses, measured on the reference host
# (docs/benchmarks.md: bench/density.py, 1.61 MiB of host memory and one task per idle
# container; QEMU's threads for a VM, whose guest RAM is touched at boot): the requests a
# sandbox gets when it names none. Its limits are what bound it when it wakes; a node's measured
# working set, its cgroup caps and its pids backstop are what keep the node safe then.
CONTAINER_REQUESTS = {"cpu": 0.001, "memory_mb": 2, "disk_mb": 4, "pids": 2}
VM_REQUESTS = {"cpu": 0.001, "disk_mb": 4, "pids": 32}  # memory: the guest's RAM (memory_mb)


def default_requests(backend: str, *, cpu: float, memory_mb: int, disk_mb: int, pids_limit: int) -> dict:
    """The requests of a sandbox that names none: its kind's idle use, capped by its limits."""
    limits = {"cpu": cpu, "memory_mb": memory_mb, "disk_mb": disk_mb, "pids": pids_max(backend, pids_limit)}
    if backend in VM_BACKENDS:
        defaults = {**VM_REQUESTS, "memory_mb": memory_mb}
    else:
        defaults = CONTAINER_REQUESTS
    return {name: min(value, limits[name]) for name, value in defaults.items()}


def resolve_backend(backend: str, *, isolation: str = "container", display: bool = False,
                    disk_image: str | None = None) -> ConcreteBackend:
    """The sandbox kind a request gets. ``auto`` picks the lightest kind that can do the job:
    a screen or a user disk image needs a full ``vm``, a hardware boundary a ``microvm``,
    everything else a ``container``. An explicit kind that cannot do the job is refused."""
    if backend == "auto":
        if display or disk_image:
            return "vm"
        return "microvm" if isolation == "vm" else "container"
    if display and backend != BackendKind.vm:
        raise ValueError(f"display needs backend 'vm' (or 'auto'), not {backend!r}")
    if disk_image and backend != BackendKind.vm:
        raise ValueError(f"disk_image needs backend 'vm' (or 'auto'), not {backend!r}")
    if isolation == "vm" and backend == BackendKind.container:
        raise ValueError("isolation 'vm' needs backend 'microvm' or 'vm' (or 'auto'), not 'container'")
    return backend  # type: ignore[return-value]


def check_labels(value: dict[str, str]) -> dict[str, str]:
    """The label rules, for every model that takes labels (a sandbox's, a job's added to each
    of its sandboxes): one that passes here can never fail a sandbox's spec later."""
    import re

    if len(value) > 64:
        raise ValueError("at most 64 labels")
    for key, val in value.items():
        if not re.match(LABEL_KEY_PATTERN, key):
            raise ValueError(f"invalid label key {key!r}")
        if len(val) > 256 or "\n" in val:
            raise ValueError(f"invalid label value for {key!r}")
    return value


class SandboxSpec(BaseModel):
    """What a caller asks for. Validated once at the api; trusted by the services behind it."""

    environment: str = Field("", max_length=200,
                             description="Environment name (image-service); not needed with disk_image or from_snapshot")
    backend: Backend = Field("auto", description="Sandbox kind; 'auto' is resolved at creation (see isolation, display)")
    isolation: Literal["container", "vm"] = Field(
        "container", description="'vm' asks for a hardware boundary (auto picks microvm); once resolved, what the "
                                 "kind gives: 'vm' for microvm and vm")
    display: bool = Field(False, description="A screen with keyboard and mouse (auto picks vm)")
    disk_image: str | None = Field(None, max_length=200,
                                   description="Boot this disk image (image-service name[:version]) instead of layers")
    from_snapshot: str | None = Field(None, max_length=64, description="Restore this snapshot as a new sandbox")
    cpu: float = Field(1.0, gt=0, le=64, description="CPU cores (cgroup quota)")
    memory_mb: int = Field(256, ge=16, le=262144)
    disk_mb: int = Field(1024, ge=16, le=1048576, description="Size of the writable upper layer")
    timeout_s: int = Field(3600, ge=1, le=7 * 24 * 3600, description="Wall-clock lifetime; the sandbox is ended after it")
    pids_limit: int = Field(512, ge=MIN_PIDS_LIMIT, le=65536)
    env: dict[str, str] = Field(default_factory=dict)
    # Defaults of every exec (an OCI image's WorkingDir and User, applied at create from the
    # environment's config unless given): working directory, and uid[:gid] of exec's "user".
    workdir: str | None = Field(None, max_length=4096, pattern=r"^/", description="Default working dir of execs")
    run_as: str | None = Field(None, pattern=r"^[0-9]{1,5}(:[0-9]{1,5})?$",
                               description="uid[:gid] that execs as 'user' run as (containers with a user namespace)")
    labels: dict[str, str] = Field(default_factory=dict)
    network: Network = Field(
        "none", description="'none' (no network device at all) or an allowlist: docs/network.md")
    requests: Requests = Field(
        default_factory=Requests,
        description="What placement counts (cpu, memory_mb, disk_mb, pids); cpu, memory_mb, disk_mb and pids_limit "
                    "above are the limits. Each unset request is its kind's idle use, at most its limit; a request "
                    "above its limit is refused (docs/architecture.md, \"Capacity\")")

    @model_validator(mode="after")
    def _resolve(self) -> "SandboxSpec":
        if not self.environment and not self.disk_image and not self.from_snapshot:
            raise ValueError("environment is required (unless disk_image or from_snapshot is given)")
        self.backend = resolve_backend(self.backend, isolation=self.isolation, display=self.display,
                                       disk_image=self.disk_image)
        # What the kind gives, not only what was asked: a `vm` (display, disk_image or an
        # explicit backend) is a hardware boundary though isolation was left at its default.
        self.isolation = "vm" if self.backend in VM_BACKENDS else "container"
        self.requests = resolve_requests(self)
        return self

    @property
    def reservation(self) -> "Reservation":
        """What placement counts for it: its requests, every one set."""
        r = self.requests
        if r.cpu is None or r.memory_mb is None or r.disk_mb is None or r.pids is None:
            r = resolve_requests(self)  # built without validation (model_construct)
        return Reservation(cpu=r.cpu, memory_mb=r.memory_mb, disk_mb=r.disk_mb, pids=r.pids)  # type: ignore[arg-type]

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        return env_names(value)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        return check_labels(value)


@dataclass(frozen=True)
class Reservation:
    """A sandbox's resolved requests: what the scheduler reserves on a node and the node counts."""

    cpu: float
    memory_mb: int
    disk_mb: int
    pids: int


_LIMIT_OF_REQUEST = {"cpu": "cpu", "memory_mb": "memory_mb", "disk_mb": "disk_mb", "pids": "pids_limit"}


def resolve_requests(spec: "SandboxSpec") -> Requests:
    """Every request of ``spec`` set: the ones it names (each at most its limit, else a
    ValueError naming both fields) and its kind's defaults for the rest."""
    given = spec.requests
    defaults = default_requests(spec.backend, cpu=spec.cpu, memory_mb=spec.memory_mb, disk_mb=spec.disk_mb,
                                pids_limit=spec.pids_limit)
    resolved = {}
    for name, limit_field in _LIMIT_OF_REQUEST.items():
        value = getattr(given, name)
        # A VM's host tasks are QEMU's: its cgroup's cap is VM_PIDS_LIMIT, whatever the guest's.
        limit = pids_max(spec.backend, spec.pids_limit) if name == "pids" else getattr(spec, limit_field)
        if value is not None and value > limit:  # named where it is: 422 at body.requests.<name>
            raise ValidationError.from_exception_data("SandboxSpec", [InitErrorDetails(
                type=PydanticCustomError("request_above_limit", "requests.{name}={value} is above its limit "
                                         "{limit_field}={limit}",
                                         {"name": name, "value": value, "limit_field": limit_field, "limit": limit}),
                loc=("requests", name), input=value)])
        resolved[name] = defaults[name] if value is None else value
    return Requests(**resolved)


class RuntimeInfo(TypedDict, total=False):
    """How a sandbox runs, as its node recorded it once it started (the record's ``runtime``:
    Redis, the SQL history, the public reply's ``runtime`` object). A dict on the wire and in
    Python alike (a TypedDict: the keys are typed, the JSON and equality are a dict's); each
    backend fills the keys that apply to it (``describe()``), the node adds ``backend``."""

    backend: str  # a BackendKind
    warm_pool: str  # containers: the warm-pool container it was claimed from
    machine: str  # VMs: QEMU's machine type (microvm, q35)
    accelerator: str  # VMs: kvm or tcg
    image_transport: str  # VMs: an ImageTransport (virtio-blk, virtio-pmem+dax)
    agent: str  # VMs: "corral" (the guest agent) or "none"
    qemu_user: str  # VMs: the uid:gid QEMU runs as, or "root"


class Usage(BaseModel):
    cpu_seconds: float = 0.0
    peak_memory_bytes: int = 0
    wall_time_s: float = 0.0
    oom_kills: int = 0
    # Egress (sandboxes with an allowlist): bytes through its interface each way, and the
    # connections and DNS queries the node refused.
    network_tx_bytes: int = 0
    network_rx_bytes: int = 0
    network_denied: int = 0
    # Memory as the node sampled it every second (its cgroup less inactive page cache: the
    # working set); memory·time is that working set integrated over the sandbox's life.
    memory_mib_seconds: float = 0.0
    peak_working_set_bytes: int = 0
    working_set_bytes: int = 0
    swap_bytes: int = 0  # moved out to compressed swap by the memory-manager's reclaim
    # Bytes in use on the sandbox's own disk (its writable layer), where the node can read it
    # (containers; 0 for kinds whose disk only the guest sees).
    disk_used_bytes: int = 0


# The spec fields a warm pool's claim sets (not part of a shape: warm_pool_shape).
WARM_POOL_CLAIM_FIELDS = frozenset({"timeout_s", "labels", "workdir"})


def warm_pool_shape(spec: SandboxSpec, tenant: str, layers: Sequence[str] | None = None) -> str | None:
    """What a node's warm pool keeps containers of (node-agent sandboxes/warm_pool.py), as the
    node advertises it and the scheduler looks for it: a digest of the tenant, every field of
    the spec that reaches a container when it starts and the layer digests it is mounted from
    (``layers``: the create's pinned image, ``ResolvedImage.digests``; None: a record without a
    pin, whose node resolves the name). None: never pooled (not a container of an environment
    without network, or restored from a snapshot, or booted from a disk image)."""
    if not (spec.backend == BackendKind.container and spec.environment and spec.network == "none"
            and spec.from_snapshot is None and spec.disk_image is None):
        return None
    parts: list = [tenant, spec.model_dump(mode="json", exclude=set(WARM_POOL_CLAIM_FIELDS))]
    if layers is not None:
        parts.append(list(layers))
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
