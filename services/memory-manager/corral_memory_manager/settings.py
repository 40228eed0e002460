"""Memory-manager settings: its own fields read ``CORRAL_MEMORY_MANAGER_*`` (see ``corral_common.settings``).

The node id reads ``CORRAL_NODE_ID``, the node-agent's name for it, so one node's env block
configures both. ``proc_root`` / ``sys_root`` point at a fake tree in tests,
or at the host's /proc and /sys bind-mounted somewhere else in a container.
"""

from typing import TYPE_CHECKING, ClassVar

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from corral_common.settings import CommonSettings, PrefixedServiceSettings

if TYPE_CHECKING:
    from corral_memory_manager.balloons.policy import BalloonPolicy
    from corral_memory_manager.reclaim.idleness import IdleRule
    from corral_memory_manager.reclaim.policy import ReclaimPolicy
    from corral_memory_manager.reclaim.pressure import PressureRule


class MemoryManagerSettings(PrefixedServiceSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_MEMORY_MANAGER_", extra="ignore")
    renamed_fields: ClassVar[dict[str, str]] = {
        **CommonSettings.renamed_fields, "memory_manager_host": "host", "memory_manager_port": "port"}

    host: str = "127.0.0.1"
    port: int = 8003
    # The node-agent's name for it: the two services of one node must agree on it.
    node_id: str = Field("node-1", validation_alias="CORRAL_NODE_ID")
    proc_root: str = Field("/proc", validation_alias=AliasChoices(
        "CORRAL_MEMORY_MANAGER_PROC_ROOT", "CORRAL_PROC_ROOT"))
    sys_root: str = Field("/sys", validation_alias=AliasChoices("CORRAL_MEMORY_MANAGER_SYS_ROOT", "CORRAL_SYS_ROOT"))

    # Proactive reclaim (docs/memory.md): every reclaim_interval_s, the node's idle
    # (cpu time still for reclaim_idle_after_s) and paused sandboxes' memory is paged out
    # (MADV_PAGEOUT) into swap; active sandboxes are never touched. Without swap only clean
    # file pages go: set zram_swap_mb for a compressed swap in RAM.
    reclaim_enabled: bool = True
    reclaim_interval_s: float = Field(5.0, gt=0)
    # The most of one core the passes may take: past it (thousands of sandboxes: a pass reads 4
    # cgroup files per sandbox) the interval stretches instead. 0: always reclaim_interval_s.
    reclaim_max_duty: float = Field(0.03, ge=0, le=1)
    reclaim_idle_after_s: float = Field(60.0, ge=0)
    # Idle means, over each pass's window, a cpu rate at or under this fraction of a core and no
    # exec/file/port call through the node-agent (its /v1/activity) for reclaim_idle_after_s.
    # Containers: an idle one uses none.
    reclaim_idle_cpu_cores: float = Field(0.01, ge=0, le=64)
    # The same for VMs, whose QEMU ticks with nothing running in the guest: a few % of a core
    # under TCG (this default, with headroom), ~1% with KVM (0.05 is then safer for reclaim).
    reclaim_vm_idle_cpu_cores: float = Field(0.15, ge=0, le=64)
    # Less than this in a sandbox's working set: not worth a pass.
    reclaim_min_mb: int = Field(8, ge=0)
    # A reclaimed sandbox is reclaimed again once its working set grew back by this much, or
    # after reclaim_cooldown_s (hysteresis: no pageout loop on a sandbox that faults pages back).
    reclaim_regrow_mb: int = Field(16, ge=0)
    reclaim_cooldown_s: float = Field(300.0, ge=0)
    reclaim_max_mb_per_pass: int = Field(1024, gt=0)
    # Pressure-driven reclaim, before the kernel's OOM killer has to act: while host MemAvailable
    # is under reclaim_pressure_available_mb, or PSI memory "some avg10" (% of the last 10 s with
    # a task stalled on memory) is over reclaim_pressure_psi_some_pct, sandboxes idle for
    # reclaim_pressure_idle_after_s are already due. Active ones never are. 0: that signal off.
    reclaim_pressure_available_mb: int = Field(0, ge=0)
    reclaim_pressure_psi_some_pct: float = Field(0.0, ge=0, le=100)
    reclaim_pressure_idle_after_s: float = Field(10.0, ge=0)
    # MiB of zram swap to set up at start if no zram swap is active (0: none; the host's own
    # swap is never changed). Needs root and util-linux's mkswap/swapon.
    zram_swap_mb: int = Field(0, ge=0)
    zram_algorithm: str = "lz4"

    # VM balloons (docs/memory.md): every balloon_interval_s each VM's balloon is read through the
    # node-agent (the one QMP client of each VM) at node_agent_url and set from its guest's stats.
    balloon_enabled: bool = True
    balloon_interval_s: float = Field(2.0, gt=0)
    node_agent_url: str = "http://127.0.0.1:8100"
    # Headroom left to a guest above what it uses (the larger of the two), and its floor.
    balloon_reserve_mb: int = Field(64, ge=0)
    balloon_reserve_fraction: float = Field(0.10, ge=0, le=1)
    balloon_floor_fraction: float = Field(0.25, gt=0, le=1)
    # Guest MemAvailable below this (or any swap-in): deflate at once.
    balloon_low_available_mb: int = Field(48, ge=0)
    # Hysteresis: a busy VM's balloon is inflated only after this many consecutive passes ask
    # for it (to the highest of their targets); an idle VM's at once. Deflating is always at once.
    balloon_inflate_after_passes: int = Field(5, ge=1)
    # An idle VM (reclaim_idle_after_s) whose guest holds more page cache than this is asked,
    # through its guest agent, to drop it and compact (free page reporting returns it). 0: off.
    guest_cache_reclaim_mb: int = Field(64, ge=0)

    # KSM policy: the scanner runs while the node holds at least ksm_min_same_image VMs of one
    # environment, at ksm_pages_to_scan, and is stopped again when they are gone or the manager
    # stops; a scanner the host already ran is never stopped. On by default: idle guests of one
    # image share their kernel and zero pages, ~70 of an idle microVM's 94 MiB of guest RAM
    # (docs/benchmarks.md, issue 36 item 7), for ksmd's CPU while it scans.
    ksm_policy_enabled: bool = True
    ksm_min_same_image: int = Field(3, ge=2)
    ksm_pages_to_scan: int = Field(1000, ge=1, le=10_000_000)

    def balloon_policy(self) -> "BalloonPolicy":
        from corral_memory_manager.balloons.policy import BalloonPolicy

        return BalloonPolicy(reserve_mb=self.balloon_reserve_mb, reserve_fraction=self.balloon_reserve_fraction,
                             floor_fraction=self.balloon_floor_fraction,
                             low_available_mb=self.balloon_low_available_mb,
                             inflate_after_passes=self.balloon_inflate_after_passes)

    def pressure_rule(self) -> "PressureRule":
        from corral_memory_manager.reclaim.pressure import PressureRule

        return PressureRule(available_mb=self.reclaim_pressure_available_mb,
                            psi_some_avg10=self.reclaim_pressure_psi_some_pct,
                            idle_after_s=self.reclaim_pressure_idle_after_s)

    def idle_rule(self) -> "IdleRule":
        from corral_memory_manager.reclaim.idleness import IdleRule

        return IdleRule(cpu_cores=self.reclaim_idle_cpu_cores, vm_cpu_cores=self.reclaim_vm_idle_cpu_cores)

    def reclaim_policy(self) -> "ReclaimPolicy":
        from corral_memory_manager.reclaim.policy import ReclaimPolicy

        mib = 1 << 20
        return ReclaimPolicy(idle_after_s=self.reclaim_idle_after_s, min_bytes=self.reclaim_min_mb * mib,
                             regrow_bytes=self.reclaim_regrow_mb * mib, cooldown_s=self.reclaim_cooldown_s,
                             max_bytes_per_pass=self.reclaim_max_mb_per_pass * mib)
