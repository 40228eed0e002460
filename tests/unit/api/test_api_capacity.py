"""The api's node ceilings (pure part: which live nodes decide them, which field is named)."""

import pytest

from corral_api.sandboxes.capacity import NodeCeilings
from corral_common.contracts.sandboxes import VM_PIDS_LIMIT, SandboxSpec
from corral_common.store.state_nodes import NodeInfo
from corral_common.web.errors import Unprocessable


def node(node_id, pids=8000, backends=("container",), cpu_milli=4000, memory_mb=8000, disk_mb=None):
    return NodeInfo(node_id=node_id, url="", cpu_milli=cpu_milli, memory_mb=memory_mb, max_sandboxes=10,
                    heartbeat_at=0.0, backends=backends, pids=pids, disk_mb=disk_mb)


class LiveNodes:
    def __init__(self, *nodes):
        self.nodes = list(nodes)

    async def live_nodes(self, heartbeat_timeout_s):
        return self.nodes


async def refusal(nodes, max_disk_mb=0, **spec) -> Unprocessable | None:
    ceilings = NodeCeilings(LiveNodes(*nodes), 10, max_disk_mb=max_disk_mb, ttl_s=0)
    try:
        await ceilings.require(SandboxSpec(environment="e", **spec))
    except Unprocessable as exc:
        return exc
    return None


@pytest.mark.parametrize("field,value,code", [
    ("pids_limit", 12_001, "exceeds_node_capacity"),
    ("memory_mb", 16_001, "exceeds_node_capacity"),
    ("cpu", 8.5, "exceeds_node_capacity"),
    ("disk_mb", 50_001, "disk_too_large"),
])
async def test_the_biggest_node_running_the_kind_sets_each_ceiling(field, value, code):
    nodes = [node("a", 4000, disk_mb=20_000),
             node("b", 12_000, cpu_milli=8000, memory_mb=16_000, disk_mb=50_000),
             node("v", 30_000, backends=("microvm",), cpu_milli=64_000, memory_mb=64_000, disk_mb=90_000)]
    exc = await refusal(nodes, **{field: value})
    assert exc is not None and exc.code == code and exc.loc == ["body", field]
    at_most = {"pids_limit": 12_000, "memory_mb": 16_000, "cpu": 8, "disk_mb": 50_000}[field]
    assert await refusal(nodes, **{field: at_most}) is None


async def test_a_vm_is_judged_by_what_it_takes_from_the_node():
    vm_node = node("v", pids=VM_PIDS_LIMIT, backends=("microvm",), memory_mb=1000)
    assert await refusal([vm_node], backend="microvm", pids_limit=60_000) is None  # QEMU's threads, not the guest's
    exc = await refusal([vm_node], backend="microvm", memory_mb=1000)  # plus QEMU's overhead
    assert exc is not None and exc.loc == ["body", "memory_mb"] and "overhead" in exc.message
    exc = await refusal([node("v", pids=VM_PIDS_LIMIT - 1, backends=("microvm",))], backend="microvm")
    assert exc is not None and exc.loc == ["body", "pids_limit"]


async def test_no_ceiling_without_a_node_to_judge_by():
    huge = {"pids_limit": 65_536, "memory_mb": 1 << 18, "cpu": 64, "disk_mb": 1 << 20}
    assert await refusal([], **huge) is None  # the request queues; the scheduler decides later
    assert await refusal([node("a")], backend="vm", **huge) is None  # nobody runs it: unschedulable, not 422
    assert await refusal([node("a", 4000), node("old", None)], pids_limit=8000) is None  # one counts no pids
    assert await refusal([node("old")], disk_mb=1 << 20) is None  # no node advertises a disk


async def test_the_operators_disk_maximum_applies_with_no_node_up():
    exc = await refusal([], max_disk_mb=2048, disk_mb=4096)
    assert exc is not None and exc.code == "disk_too_large" and "2048" in exc.message
