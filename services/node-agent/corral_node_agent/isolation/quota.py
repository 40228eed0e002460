"""How much a sandbox may write. Today always memory-backed: a tmpfs of the quota's size
holds everything the sandbox writes and vanishes with it.

- containers: the tmpfs upper of the rootfs overlay (backends/container/bundle.py), ``disk_mb``;
- VMs: the guest's tmpfs upper (kernel cmdline ``upper_mb``), ``disk_mb``;
- fncall runs: ``/work`` and ``/tmp`` each, the run's memory limit (tmpfs pages count
  against the run's memory cgroup, so the memory limit caps them together).

A block-device or project quota (ext4/xfs) would be decided here, with the runtimes
rendering it as their mount.
"""

from dataclasses import dataclass

from corral_common.sandboxes import SandboxSpec

MIB = 1024 * 1024


@dataclass(frozen=True)
class DiskQuota:
    size_bytes: int

    @property
    def size_mb(self) -> int:
        return self.size_bytes // MIB


def disk_quota(spec: SandboxSpec) -> DiskQuota:
    return DiskQuota(size_bytes=spec.disk_mb * MIB)
