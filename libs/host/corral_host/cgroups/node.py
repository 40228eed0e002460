"""The node's cgroup: everything the node runs for tenants lives below ``/corral/<node>``.

    /corral/<node>                      pids.max = the node's pids claim, memory = its memory claim
    /corral/<node>/<sandbox>            a container (crun creates it) or a VM's QEMU (the agent does)
    /corral/<node>/_fncall-<instance>/  the fncall workers of one agent (``_``: never a sandbox id)

The agent caps it at start (``cap``), so however a sandbox's own limits add up, the node's
processes and threads stay below its share of the host's pid_max (the system reserve keeps
Redis, RabbitMQ, QEMU's launcher and the agent itself able to fork) and its memory below its
share of RAM. Both cgroup versions charge a child's tasks and memory to every ancestor, so the cap
costs nothing per sandbox. The cgroup outlives the agent with the sandboxes it leaves to be
re-adopted (a graceful stop with nothing left running removes it, and so does
``python -m corral_node_agent cleanup``).
"""

from corral_common.logging import get_logger
from corral_host.cgroups.base import Cgroup, CgroupDriver

log = get_logger(__name__)

ROOT = "/corral"


def node_cgroup_path(node_id: str) -> str:
    return f"{ROOT}/{node_id}"


def sandbox_cgroup_path(node_id: str, sandbox_id: str) -> str:
    return f"{ROOT}/{node_id}/{sandbox_id}"


def fncall_cgroup_path(node_id: str, instance: str = "") -> str:
    return f"{ROOT}/{node_id}/_fncall" + (f"-{instance}" if instance else "")


def cap(driver: CgroupDriver, node_id: str, memory_bytes: int, pids: int) -> Cgroup | None:
    """Create the node's cgroup and cap it (None where the host gives the node no cgroups).
    A memory cap below what adopted sandboxes already use is not applied (logged); the pids
    cap always is (it only stops new forks)."""
    if not driver.available():
        return None
    group = driver.cgroup(node_cgroup_path(node_id)).create()
    try:
        group.set_limits(memory_bytes, pids)
    except OSError as exc:
        log.warning("node.memory_cap_not_applied", node_id=node_id, memory_bytes=memory_bytes, error=str(exc))
    log.info("node.cgroup_capped", node_id=node_id, path=group.path, pids=pids, memory_mb=memory_bytes >> 20)
    return group


def prune(driver: CgroupDriver, node_id: str) -> None:
    """Remove the node's cgroup (and /corral) where they are empty: it takes its caps along,
    so only once the agent is done with it."""
    driver.cgroup(node_cgroup_path(node_id)).remove_if_empty()
    driver.cgroup(ROOT).remove_if_empty()


def release(driver: CgroupDriver, node_id: str) -> None:
    """At a graceful stop: drop the node's cgroup if nothing runs in it any more (sandboxes
    left to be re-adopted keep it, and its caps, for the next run of the agent)."""
    if driver.available() and not in_use(driver, node_id):
        prune(driver, node_id)


def in_use(driver: CgroupDriver, node_id: str) -> bool:
    """Whether anything still runs in the node's cgroup (sandboxes left for re-adoption)."""
    return driver.available() and driver.cgroup(node_cgroup_path(node_id)).populated()
