"""The VM balloon, the memory-manager's lever: read through QEMU's guest-stats, set through
QMP (the agent's QemuMachine is the one QMP client)."""

from qemu.qmp import ExecuteError

from corral_common.contracts.memory import BalloonState, GuestMemoryStats
from corral_node_agent.backends.vm.running import RunningVm
from corral_node_agent.errors import Unsupported

MIB = 1024 * 1024


async def read(vm: RunningVm) -> BalloonState:
    try:
        actual, stats = await vm.machine.balloon_stats()
    except ExecuteError as exc:  # e.g. adopted from an agent that gave the balloon no id
        raise Unsupported(f"the VM's balloon cannot be read: {exc}") from exc
    return BalloonState(sandbox_id=vm.sandbox_id, environment=vm.spec.environment,
                        memory_mb=vm.config.memory_mb, actual_mb=actual / MIB,
                        guest=guest_memory_stats(stats))


async def set_target(vm: RunningVm, target_mb: int) -> None:
    """Inflate or deflate towards ``target_mb`` of guest RAM (never above what it booted with)."""
    await vm.machine.set_balloon(min(target_mb, vm.config.memory_mb) * MIB)


def guest_memory_stats(report: dict) -> GuestMemoryStats:
    """QEMU's ``guest-stats`` (bytes, -1 for what the guest does not report) in MiB."""
    stats = report.get("stats", {})

    def value(key: str, scale: float = MIB) -> float | None:
        raw = stats.get(key, -1)
        return None if raw is None or raw < 0 else raw / scale

    def count(key: str) -> int | None:
        raw = stats.get(key, -1)
        return None if raw is None or raw < 0 else int(raw)

    return GuestMemoryStats(total_mb=value("stat-total-memory"), free_mb=value("stat-free-memory"),
                            available_mb=value("stat-available-memory"), disk_caches_mb=value("stat-disk-caches"),
                            swap_in=count("stat-swap-in"), swap_out=count("stat-swap-out"),
                            major_faults=count("stat-major-faults"), last_update=int(report.get("last-update", 0)))
