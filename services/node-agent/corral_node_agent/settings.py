"""Node-agent settings.

Node-specific settings use the ``CORRAL_NODE_`` prefix (``CORRAL_NODE_PORT``,
``CORRAL_NODE_STATE_DIR``...); the node id is ``CORRAL_NODE_ID`` (``CORRAL_NODE_NODE_ID`` is
accepted too). Settings shared by every service (``CORRAL_REDIS_URL``,
``CORRAL_IMAGE_SERVICE_URL``, ``CORRAL_INTERNAL_TOKEN``...) keep their ``CORRAL_`` names: one
deployment-wide env block configures every service, so a node must not need them repeated
under its own prefix (``CORRAL_NODE_REDIS_URL`` still wins when both are set).

A package's own settings are a section of their own, nested here and handed to that package
alone: ``vm`` (backends/vm/settings.py), ``egress`` (network/settings.py), ``warm_pool``
(sandboxes/settings.py), ``isolation`` (isolation/settings.py). Their variables are
``CORRAL_NODE_<SECTION>__<FIELD>``; the flat names of before (``CORRAL_NODE_VM_BOOT_TIMEOUT_S``)
are still read, as are the flat keywords and attributes (section.py).
"""

import json
import os
import typing
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from corral_common.settings import PrefixedServiceSettings
from corral_node_agent.backends.vm.settings import VmSettings
from corral_node_agent.fncall.settings import FncallNodeSettings
from corral_node_agent.isolation.settings import IsolationSettings
from corral_node_agent.network.settings import EgressSettings
from corral_node_agent.sandboxes.settings import WarmPoolSettings
from corral_node_agent.section import NodeSection, flat_names

# The nested sections (attribute -> model), each owned by its package.
SECTIONS: dict[str, type[NodeSection]] = {"vm": VmSettings, "warm_pool": WarmPoolSettings,
                                          "isolation": IsolationSettings, "egress": EgressSettings}
FLAT_NAMES = flat_names(SECTIONS)
# ...and the flat attributes (the keywords, and the properties that moved with their fields).
FLAT_ATTRIBUTES = {**FLAT_NAMES, "sandbox_uid": ("isolation", "sandbox_uid"), "sandbox_gid": ("isolation", "sandbox_gid")}


def _default_disk_capacity_mb(state_dir: str, share: float) -> int:
    """``share`` of 90% of what the filesystem holding state_dir (or its nearest existing
    parent) has free: agents sharing a host split its disk as they split cpu and memory."""
    path = os.path.abspath(state_dir)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return int(st.f_bavail * st.f_frsize * 0.9 * share) // (1024 * 1024)


class _SectionEnvSource(PydanticBaseSettingsSource):
    """The sections' fields from the environment: each field's ``validation_alias`` choices in
    order (CORRAL_NODE_<SECTION>__<FIELD>, then its flat name of before), case-insensitive as
    pydantic-settings' own env source; JSON for dict and list fields, as that source decodes them."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # all the work is in __call__

    def __call__(self) -> dict[str, Any]:
        env = {key.lower(): value for key, value in os.environ.items()}
        out: dict[str, Any] = {}
        for section, model in SECTIONS.items():
            values = {}
            for name, field in model.model_fields.items():
                choices = field.validation_alias.choices if isinstance(field.validation_alias, AliasChoices) else []
                for choice in choices:
                    raw = env.get(str(choice).lower())
                    if raw is not None:
                        values[name] = _decode(choice, field, raw)
                        break
            if values:
                out[section] = values
        return out


def _decode(env_name: Any, field: FieldInfo, raw: str) -> Any:
    if typing.get_origin(field.annotation) not in (dict, list):
        return raw
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise SettingsError(f'error parsing value for field "{env_name}" from source "_SectionEnvSource"') from exc


class LayerSettings(BaseModel):
    """What the layer cache needs, built by ``NodeAgentSettings.layers()`` (the defaults and
    env names of the node's fields live there)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state_dir: str
    image_service_url: str
    internal_token: str = ""
    mode: Literal["lazy", "eager"]
    cache_mb: int
    fetch_deadline_s: float
    prefetch: bool
    # A whole blob or disk image download (chunk fetches have fetch_deadline_s).
    download_timeout_s: float = 300.0
    mkfs_erofs: str = "mkfs.erofs"
    qemu_img: str = "qemu-img"


class NodeAgentSettings(PrefixedServiceSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_NODE_", extra="ignore", populate_by_name=True)

    node_id: str = Field("node-1", validation_alias=AliasChoices("CORRAL_NODE_ID", "CORRAL_NODE_NODE_ID"))
    host: str = "127.0.0.1"
    port: int = 8100
    # The URL the api reaches this agent at (the data path), as the heartbeat advertises it.
    # Empty: http://<host>:<port>, right when host is a name or address the api can reach; set
    # it where the agent binds 0.0.0.0 or is reached through another address (a pod IP, a
    # load balancer, https), e.g. http://10.0.3.7:8100.
    advertise_url: str = ""
    # Empty means /var/lib/corral/<node_id>, so two agents on one host never share state.
    state_dir: str = ""
    crun: str = "crun"
    # Every container's PID 1 (backends/container/oci.py INIT_ARGS): a statically linked
    # init that idles and reaps in pause mode (-P), bound read-only into the container from a
    # copy the agent makes at its first start (backends/container/shared_mounts.py).
    container_init: str = "/usr/bin/catatonit"
    # The longest a container's start (`crun run`: namespaces, mounts, its init's exec) may
    # take: past it crun and whatever it started are killed and the start fails, so no
    # sandbox stays "starting" on a hung runtime (a kernel stall, a runtime bug). A start
    # takes ~10-50 ms, and up to seconds inside a density run's batches of 500.
    container_start_timeout_s: float = Field(120.0, gt=0)
    # Capacity (docs/architecture.md, "Capacity"): the cores of its host this node takes. Unset:
    # host_share of them. Never more than the other agents on the host left free (see
    # capacity_registry_dir): a claim beyond that is clamped, and logged.
    cpu_capacity: float | None = Field(None, gt=0)
    # Seconds between two memory samples of every sandbox's cgroup (working set, memory·time in
    # Usage, GET /v1/nodes and /metrics). ~25 µs per sandbox per pass (docs/memory.md).
    memory_sample_interval_s: float = Field(1.0, gt=0, le=60)
    # The most of one core the memory samples may take: past it (thousands of sandboxes) the
    # interval stretches instead (docs/memory.md). 0: always memory_sample_interval_s.
    memory_sample_max_duty: float = Field(0.02, ge=0, le=1)
    # MiB of the host's RAM this node takes (its cgroup's memory cap). Unset: host_share of RAM
    # less system_reserved_memory_mb.
    memory_capacity_mb: int | None = Field(None, gt=0)
    # Tasks (processes + threads) its sandboxes, VMs and fncall workers may hold together (its
    # cgroup's pids.max). Unset: host_share of min(kernel.pid_max, kernel.threads-max) less
    # system_reserved_pids.
    pids_capacity: int | None = Field(None, gt=0)
    # The fraction of the host this node takes where a capacity is not set: 1/N for N agents on
    # one host (`make up` and the e2e platform set it).
    host_share: float = Field(1.0, gt=0, le=1)
    # Kept back for the OS and the platform's own services (Redis, RabbitMQ, the agents...), like
    # kubelet's system-reserved. Unset: a tenth of RAM, at least 1024 MiB.
    system_reserved_memory_mb: int | None = Field(None, ge=0)
    # The node's last resort when its sandboxes wake together (capacity/memory_guard.py): below
    # this much available memory on the host, the node cgroup's limit drops to what it holds, so
    # the kernel reclaims and OOM-kills inside the node before the host thrashes. Unset: half
    # the system reserve; 0: off.
    memory_guard_floor_mb: int | None = Field(None, ge=0)
    # Tasks kept back the same way: whatever the sandboxes do, the platform can still fork.
    system_reserved_pids: int = Field(4096, ge=0)
    # The node advertises cpu_capacity x cpu_overcommit to the scheduler: sandboxes idle between
    # commands, so by default 8 one-core sandboxes per core.
    cpu_overcommit: float = Field(8.0, gt=0)
    # ... and memory_capacity_mb x memory_overcommit (1: none; above 1 the node's cgroup still
    # caps the node at memory_capacity_mb). Pids are never overcommitted.
    memory_overcommit: float = Field(1.0, gt=0)
    # Host-wide registry (flock'd files on tmpfs) where the agents sharing a host claim their share.
    capacity_registry_dir: str = "/run/corral/capacity"
    # Sandboxes this node runs at once. 0: no count of its own beyond what its resources hold,
    # i.e. its pids claim // 1 (the smallest pids request a sandbox may make), at most the user
    # namespace id ranges it can hand out; the scheduler's reservations of cpu, memory, pids and
    # disk are what fill a node (docs/architecture.md, "Capacity").
    max_sandboxes: int = Field(0, ge=0)
    # At start, take over the sandboxes a previous run of this agent left running (false:
    # delete them, as `python -m corral_node_agent cleanup` always does).
    adopt_on_start: bool = True
    output_limit_bytes: int = 1024 * 1024
    max_upload_bytes: int = 1024 * 1024 * 1024
    # Sandboxes' disks (disk_mb each: an ext4 image per sandbox under state_dir, see
    # isolation/quota.py): what the node advertises and the scheduler fills with the sandboxes'
    # disk requests. 0: host_share of 90% of what the state dir's filesystem has free when the
    # agent starts.
    disk_capacity_mb: int = 0
    # The watermark (capacity/disk.py): MiB kept free on the state dir's filesystem. Below it
    # the node advertises no disk room and new sandboxes wait; the running ones share what is
    # left above the hard watermark, half of it, which the host always keeps (disks/pressure.py:
    # past its part a writer gets ENOSPC).
    # Unset: 5% of the filesystem, at least 1024 MiB.
    disk_free_reserve_mb: int | None = Field(None, ge=0)
    # Reserve each container's whole disk_mb on the host when it is created (fallocate, no I/O),
    # so the host cannot run out of room under a sandbox that stays within its disk_mb. Off
    # (the default), containers' disks are thin: they take host space as they are written, the
    # node's disk requests and its two watermarks keep the host's filesystem from filling. VMs'
    # disks are always preallocated (their ext4 is out of the host's reach).
    disk_preallocate: bool = False
    # Containers: disks kept ready (made and mounted ahead, by a thread of their own) for
    # each of the two sizes most recently asked for, up to 4 GiB, so a create only moves one
    # into place. 0: every create makes its disk (~4 ms).
    disk_pool: int = 2
    # Image layers: "lazy" mounts each layer from a FUSE file whose chunks are fetched on
    # first read; "eager" downloads the whole blob before the sandbox starts.
    layer_mode: Literal["lazy", "eager"] = "lazy"
    # Bound of the node-wide chunk cache (LRU; chunks of mounted layers are never evicted).
    layer_cache_mb: int = 20480
    # A chunk read retries with backoff this long, then fails with EIO.
    layer_fetch_deadline_s: float = 15.0
    # Fetch all of a layer's chunks in the background once it is mounted.
    layer_prefetch: bool = False
    # The VM backends (microvm / vm): QEMU, the guest kit, boot and watchdog timings.
    vm: VmSettings = Field(default_factory=VmSettings)
    # Warm pools (sandboxes/warm_pool.py): containers started ahead per shape creates ask for.
    warm_pool: WarmPoolSettings = Field(default_factory=WarmPoolSettings)
    # Who sandboxes and VMs run as on the host (user namespaces, QEMU's uids).
    isolation: IsolationSettings = Field(default_factory=IsolationSettings)
    # Egress of sandboxes with an allowlist (docs/network.md; the presets and the sandboxes'
    # subnet are CORRAL_NETWORK_*).
    egress: EgressSettings = Field(default_factory=EgressSettings)
    # fncall warm pools: CORRAL_FNCALL_* (FncallNodeSettings reads its own env names).
    fncall: FncallNodeSettings = Field(default_factory=FncallNodeSettings)

    def __init__(self, **values: Any) -> None:
        # The flat keywords of before the sections (vm_boot_timeout_s=...) still work.
        for flat, (section, name) in FLAT_NAMES.items():
            if flat in values:
                current = values.get(section)
                nested = current.model_dump() if isinstance(current, BaseModel) else dict(current or {})
                nested.setdefault(name, values.pop(flat))
                values[section] = nested
        super().__init__(**values)

    if not TYPE_CHECKING:  # mypy sees only the nested names: new code uses those
        def __getattr__(self, name: str) -> Any:
            target = FLAT_ATTRIBUTES.get(name)
            if target is None:
                return super().__getattr__(name)
            return getattr(getattr(self, target[0]), target[1])

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        init, *rest = super().settings_customise_sources(settings_cls, init_settings, env_settings, dotenv_settings,
                                                         file_secret_settings)
        return init, _SectionEnvSource(settings_cls), *rest

    @model_validator(mode="after")
    def _derive(self) -> "NodeAgentSettings":
        if not self.state_dir:
            self.state_dir = f"/var/lib/corral/{self.node_id}"
        if self.disk_capacity_mb <= 0:
            self.disk_capacity_mb = _default_disk_capacity_mb(self.state_dir, self.host_share)
        if self.advertise_url:
            parts = urlsplit(self.advertise_url)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
                raise ValueError(f"advertise_url {self.advertise_url!r} must be an http(s)://host[:port] URL")
        return self

    def layers(self) -> LayerSettings:
        return LayerSettings(state_dir=self.state_dir, image_service_url=self.image_service_url,
                             internal_token=self.internal_token, mode=self.layer_mode, cache_mb=self.layer_cache_mb,
                             fetch_deadline_s=self.layer_fetch_deadline_s, prefetch=self.layer_prefetch)

    @property
    def url(self) -> str:
        """What the heartbeat advertises: advertise_url, else http://<host>:<port>."""
        return self.advertise_url.rstrip("/") or f"http://{self.host}:{self.port}"
