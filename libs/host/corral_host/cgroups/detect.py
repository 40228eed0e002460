"""Which cgroup driver this host gets.

v1 where a v1 hierarchy of a controller the node uses is mounted: a v1 host, or a hybrid one
(systemd's controllers on v1, an empty cgroup2 at /sys/fs/cgroup/unified, which the agent's
private mount namespace hides for crun: see namespaces.enter_private_mount_namespace). v2 where the
unified hierarchy is mounted and no such v1 hierarchy is: current distributions, Kubernetes
nodes, a guest that mounts cgroup2 at /sys/fs/cgroup.

Not cached: what is mounted depends on the mount namespace, which the agent may enter after
an import (callers keep the driver they got as long as they need it).
"""

from corral_host.cgroups.base import CgroupDriver
from corral_host.cgroups.mounts import MOUNTINFO, cgroup_mounts
from corral_host.cgroups.v1 import CONTROLLERS, V1Driver
from corral_host.cgroups.v2 import V2Driver


def cgroup_driver(mountinfo: str = MOUNTINFO) -> CgroupDriver:
    """The driver for what is mounted (``available()`` is False on a host without the
    controllers, where the node runs without cgroups of its own)."""
    mounts = cgroup_mounts(mountinfo)
    v1 = any(m.fstype == "cgroup" and set(m.options) & set(CONTROLLERS) for m in mounts)
    if not v1 and any(m.fstype == "cgroup2" for m in mounts):
        return V2Driver(mountinfo)
    return V1Driver(mountinfo)
