"""The api's node ceiling for pids_limit (pure part: which nodes decide it)."""

from corral_api.sandboxes.capacity import most_pids
from corral_common.state import NodeInfo


def node(node_id, pids, backends=("container",)):
    return NodeInfo(node_id=node_id, url="", cpu_milli=1000, memory_mb=1000, max_sandboxes=10, heartbeat_at=0.0,
                    backends=backends, pids=pids)


def test_the_biggest_node_running_the_kind_sets_the_ceiling():
    nodes = [node("a", 4000), node("b", 12000), node("v", 30000, backends=("container", "microvm"))]
    assert most_pids(nodes, "container") == 30000
    assert most_pids(nodes[:2], "container") == 12000
    assert most_pids(nodes, "microvm") == 30000


def test_no_ceiling_without_a_node_to_judge_by():
    assert most_pids([], "container") is None  # the request queues; the scheduler decides later
    assert most_pids([node("a", 4000)], "vm") is None  # nobody runs it: unschedulable, not 422
    assert most_pids([node("a", 4000), node("old", None)], "container") is None  # one counts no pids
