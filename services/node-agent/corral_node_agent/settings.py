"""Node-agent settings.

Node-specific settings use the ``CORRAL_NODE_`` prefix (``CORRAL_NODE_PORT``,
``CORRAL_NODE_STATE_DIR``...); the node id is ``CORRAL_NODE_ID`` (``CORRAL_NODE_NODE_ID`` is
accepted too). Settings shared by every service (``CORRAL_REDIS_URL``,
``CORRAL_IMAGE_SERVICE_URL``, ``CORRAL_INTERNAL_TOKEN``...) keep their ``CORRAL_`` names: one
deployment-wide env block configures every service, so a node must not need them repeated
under its own prefix (``CORRAL_NODE_REDIS_URL`` still wins when both are set).
"""

import os
from typing import Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import (
    SettingsConfigDict,
)

from corral_common.contracts.sandboxes import DEFAULT_VM_MEMORY_OVERHEAD_MB
from corral_common.settings import PrefixedServiceSettings
from corral_node_agent.fncall.settings import FncallNodeSettings


def _default_disk_capacity_mb(state_dir: str, share: float) -> int:
    """``share`` of 90% of what the filesystem holding state_dir (or its nearest existing
    parent) has free: agents sharing a host split its disk as they split cpu and memory."""
    path = os.path.abspath(state_dir)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return int(st.f_bavail * st.f_frsize * 0.9 * share) // (1024 * 1024)


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
    sandbox_user: str = "1000:1000"
    max_upload_bytes: int = 1024 * 1024 * 1024
    # Sandboxes' disks (disk_mb each: an ext4 image per sandbox under state_dir, see
    # isolation/quota.py): what the node advertises and the scheduler fills with the sandboxes'
    # disk requests. 0: host_share of 90% of what the state dir's filesystem has free when the
    # agent starts.
    disk_capacity_mb: int = 0
    # The watermark (capacity/disk.py): MiB kept free on the state dir's filesystem. Below it
    # the node advertises no disk room and new sandboxes wait. Unset: 5% of the filesystem,
    # at least 1024 MiB.
    disk_free_reserve_mb: int | None = Field(None, ge=0)
    # Reserve each sandbox's whole disk_mb on the host when it is created (fallocate, no I/O),
    # so the host cannot run out of room under a sandbox that stays within its disk_mb. Off
    # (the default), disks are thin: they take host space as they are written, the node's
    # disk requests and its watermark are what keep the host's filesystem from filling.
    disk_preallocate: bool = False
    # Containers: disks kept ready (made and mounted ahead, by a thread of their own) for
    # each of the two sizes most recently asked for, up to 4 GiB, so a create only moves one
    # into place. 0: every create makes its disk (~4 ms).
    disk_pool: int = 2
    # Warm pools (sandboxes/warm_pool.py): containers started ahead per shape creates ask for,
    # so a create of that shape claims one instead of starting it. Each costs what an idle
    # sandbox costs (its requests count as used) and holds one of the node's max_sandboxes until
    # a create needs the slot. How many a shape gets follows its demand: its creates in the last
    # minute less one, up to warm_pool_max (0: no demand-driven pool; not on by default yet: a
    # claimed sandbox keeps its pooled crun id and cgroup name, which the test harnesses that
    # find a sandbox's processes by its id do not know yet) ...
    warm_pool_max: int = Field(0, ge=0, le=4096)
    # ... and never fewer than warm_pool_size once asked for (a fixed floor; 0: none).
    warm_pool_size: int = Field(0, ge=0, le=4096)
    # A shape nobody asked for this long is drained to zero.
    warm_pool_idle_s: float = Field(120.0, gt=0)
    # Image layers: "lazy" mounts each layer from a FUSE file whose chunks are fetched on
    # first read; "eager" downloads the whole blob before the sandbox starts.
    layer_mode: Literal["lazy", "eager"] = "lazy"
    # Bound of the node-wide chunk cache (LRU; chunks of mounted layers are never evicted).
    layer_cache_mb: int = 20480
    # A chunk read retries with backoff this long, then fails with EIO.
    layer_fetch_deadline_s: float = 15.0
    # Fetch all of a layer's chunks in the background once it is mounted.
    layer_prefetch: bool = False
    # Virtual machines (microvm / vm backends).
    qemu: str = "qemu-system-x86_64"
    # Kernel + initramfs built by `python -m corral_node_agent guestkit build`.
    guestkit_dir: str = "/var/cache/corral/guestkit"
    # "auto" uses KVM only where it is real hardware virtualisation (not kvm_pvm), else TCG.
    vm_accelerator: Literal["auto", "kvm", "tcg"] = "auto"
    # Host memory a VM costs beyond its guest RAM (QEMU itself ~35 MiB, TCG's translation
    # cache up to 64 MiB): a 256 MiB guest that fills its RAM peaked at 346 MiB under TCG.
    vm_memory_overhead_mb: int = DEFAULT_VM_MEMORY_OVERHEAD_MB
    # Boot to a guest agent that answers (TCG boots take ~2-3 s on an idle core).
    vm_boot_timeout_s: float = 90.0
    # A guest whose agent misses two pings in a row is ended as guest_unresponsive.
    vm_watchdog_interval_s: float = 10.0
    vm_watchdog_timeout_s: float = 20.0
    # Each QEMU drops to its own uid/gid, vm_uid_base + a slot number (0 = derive a base from
    # the node id, so two agents on one host do not share uids). -1 keeps QEMU as root.
    vm_uid_base: int = 0
    # Containers run in a user namespace of their own: 65,536 host uids/gids per sandbox, from
    # container_uid_base + i * 65536 (0 = ranges in [2^28, 2^31), where this node starts
    # looking derived from its node id). -1: no user namespace (every sandbox is host
    # sandbox_user, root inside is host root).
    container_uid_base: int = 0
    # Host-wide registry of claimed uid ranges (one file per range), so agents sharing a host
    # never hand out the same ids: every agent on the host must see the same directory.
    uid_registry_dir: str = "/run/corral/uid-ranges"
    # Egress (docs/network.md; the presets and the sandboxes' subnet are CORRAL_NETWORK_*). The
    # egress proxy's port and the resolver's port inside the node's egress namespace (every TCP
    # connection of a sandbox is redirected to the proxy, UDP 53 to the resolver).
    egress_proxy_port: int = Field(3128, ge=1, le=65535)
    egress_dns_port: int = Field(53, ge=1, le=65535)
    # Names the egress proxy resolves itself, before any resolver (JSON name -> [IPv4...]), like
    # /etc/hosts: e.g. {"pypi.mirror.internal": ["10.8.0.4"]}.
    egress_hosts: dict[str, list[str]] = Field(default_factory=dict)
    # The DNS server (IP[:port]) the egress proxy resolves allowed names with. Empty: the node's
    # own resolver (getaddrinfo). Sandboxes never talk to it: they get only the node's answers.
    egress_resolver: str = ""
    # The uid the egress service (resolver + proxy) runs as after binding its sockets.
    egress_uid: int = 65534
    # Connections one sandbox may hold open through the proxy at once (beyond: refused, counted).
    egress_max_connections: int = Field(256, ge=1)
    # Sandbox network namespaces (with their veth into the egress namespace) kept ready, made
    # by a thread of their own once the first sandbox with an allowlist was created, so that a
    # create only takes one. 0: every create makes its own (~5-8 ms).
    egress_pool: int = Field(4, ge=0, le=64)
    # fncall warm pools: CORRAL_FNCALL_* (FncallNodeSettings reads its own env names).
    fncall: FncallNodeSettings = Field(default_factory=FncallNodeSettings)

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
        uid, _, gid = self.sandbox_user.partition(":")
        if not uid.isdigit() or (gid and not gid.isdigit()):
            raise ValueError("sandbox_user must be UID[:GID] (numbers)")
        return self

    def layers(self) -> LayerSettings:
        return LayerSettings(state_dir=self.state_dir, image_service_url=self.image_service_url,
                             internal_token=self.internal_token, mode=self.layer_mode, cache_mb=self.layer_cache_mb,
                             fetch_deadline_s=self.layer_fetch_deadline_s, prefetch=self.layer_prefetch)

    @property
    def url(self) -> str:
        """What the heartbeat advertises: advertise_url, else http://<host>:<port>."""
        return self.advertise_url.rstrip("/") or f"http://{self.host}:{self.port}"

    @property
    def sandbox_uid(self) -> int:
        return int(self.sandbox_user.partition(":")[0])

    @property
    def sandbox_gid(self) -> int:
        uid, _, gid = self.sandbox_user.partition(":")
        return int(gid or uid)

