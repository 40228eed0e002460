"""What a node may take of its host and what it advertises: `claim(settings)` at agent start.

``resources`` has the arithmetic (host budget, share, overcommit), ``registry`` the host-wide
claims that keep several agents on one host within it; the claim caps the node's cgroup
(cgroups/node.py) and fills its heartbeat. docs/architecture.md "Capacity" explains the
settings.
"""

from corral_common.logging import get_logger
from corral_host.cgroups import node as node_cgroup
from corral_host.cgroups.base import CgroupDriver
from corral_host.cgroups.detect import cgroup_driver
from corral_node_agent.capacity.open_files import sandboxes_open_files_allow
from corral_node_agent.capacity.registry import Claim, HostRegistry, agent_key
from corral_node_agent.capacity.resources import (
    Host,
    NodeCapacity,
    Resources,
    host_budget,
    node_capacity,
    read_host,
    wanted,
)
from corral_node_agent.fncall.service import worker_tasks
from corral_node_agent.settings import NodeAgentSettings
from corral_node_agent.uids import id_range_count

__all__ = ["Claim", "NodeCapacity", "Resources", "claim"]

log = get_logger(__name__)


def claim(settings: NodeAgentSettings, *, host: Host | None = None,
          driver: CgroupDriver | None = None) -> tuple[NodeCapacity, Claim]:
    """Claim this agent's share of the host in the registry (clamped to what the other agents
    left) and derive what it advertises. The caller keeps the claim until it exits."""
    host = host or read_host()
    driver = driver or cgroup_driver()
    budget = host_budget(host, settings.system_reserved_memory_mb, settings.system_reserved_pids)
    want = wanted(budget, settings.host_share, cpu=settings.cpu_capacity, memory_mb=settings.memory_capacity_mb,
                  pids=settings.pids_capacity)
    node_id = settings.node_id

    def peer_in_use(peer: dict) -> bool:
        # A dead agent's sandboxes still run (left to be re-adopted): its share is still taken.
        # One with our node id is a previous agent of ours whose cgroup we now hold.
        other = str(peer.get("node_id", ""))
        return bool(other) and other != node_id and node_cgroup.in_use(driver, other)

    got = HostRegistry(settings.capacity_registry_dir).claim(
        agent_key(node_id, settings.state_dir), node_id, want, budget,
        meta={"state_dir": settings.state_dir}, in_use=peer_in_use)
    if got.clamped:
        log.warning("node.capacity_clamped", node_id=node_id, amounts=got.clamped, wanted=want.as_dict(),
                    granted=got.resources.as_dict(), budget=budget.as_dict(),
                    hint="other agents on this host claimed the rest; split the host with CORRAL_NODE_HOST_SHARE "
                         "or explicit CORRAL_NODE_*_CAPACITY settings")
    capacity = node_capacity(got.resources, cpu_overcommit=settings.cpu_overcommit,
                             memory_overcommit=settings.memory_overcommit, fncall_pids=worker_tasks(settings.fncall),
                             max_sandboxes=settings.max_sandboxes, id_ranges=id_range_count(settings),
                             open_files_room=sandboxes_open_files_allow())
    log.info("node.capacity", node_id=node_id, claim=got.resources.as_dict(), cpu=capacity.cpu,
             memory_mb=capacity.memory_mb, pids=capacity.pids, max_sandboxes=capacity.max_sandboxes, host={"cpus": host.cpus, "memory_mb": host.memory_mb,
                                                                      "tasks": host.tasks})
    return capacity, got
