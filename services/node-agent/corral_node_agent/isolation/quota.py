"""How much a sandbox may write: its ``disk_mb`` (``disk_quota``).

Containers and VMs hold it on a disk of their own (disks/upper.py, ``UpperDisks``); fncall
runs keep ``/work`` and ``/tmp`` as tmpfs charged to the run's memory cgroup, so the memory
limit caps them together and only this quota's number applies there.
"""

from dataclasses import dataclass

from corral_common.contracts.sandboxes import SandboxSpec

MIB = 1024 * 1024


@dataclass(frozen=True)
class DiskQuota:
    size_bytes: int

    @property
    def size_mb(self) -> int:
        return self.size_bytes // MIB


def disk_quota(spec: SandboxSpec) -> DiskQuota:
    return DiskQuota(size_bytes=spec.disk_mb * MIB)
