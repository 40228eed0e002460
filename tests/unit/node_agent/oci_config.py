"""oci.build_config with a sandbox's disk and the node's shared mounts at fixed paths (nothing is mounted)."""

from corral_node_agent.backends.container import oci
from corral_node_agent.backends.container.shared_mounts import SharedMounts

DISK_ROOT = "/n/sandboxes/sb-1/upper"
SHARED = SharedMounts(empty="/n/shared/empty", init="/n/shared/init/init", sysfs="/n/shared/sysfs", netns="/n/shared/netns",
                      masked_dirs=("/proc/acpi", "/sys/firmware"))


def build_config(sandbox_id, policy, **kw) -> dict:
    return oci.build_config(sandbox_id, policy, disk_root=DISK_ROOT, shared=SHARED, **kw)
