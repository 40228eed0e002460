"""Which cgroup driver this host gets.

Only cgroup v1 is written (crun 1.8 and the agent's private mount namespace run the host as
v1: see host.enter_private_mount_namespace). A v2 driver is one module, ``v2.py``
implementing `CgroupDriver` and `Cgroup`, and one branch here: return it when /sys/fs/cgroup
itself is a cgroup2 mount and no v1 hierarchy is mounted.

Not cached: what is mounted depends on the mount namespace, which the agent may enter after
an import (callers keep the driver they got as long as they need it).
"""

from corral_node_agent.cgroups.base import CgroupDriver
from corral_node_agent.cgroups.v1 import V1Driver


def cgroup_driver() -> CgroupDriver:
    """A v1 driver (``available()`` is False on a host without the v1 controllers, where
    the node runs without cgroups of its own, as before)."""
    return V1Driver()
