"""``corral.nodes``: the live nodes' capacity and use (``GET /v1/nodes``).

    for node in corral.nodes.list():
        print(node.node_id, node.used_cpu, "/", node.cpu)
"""

from corral import _calls as calls
from corral._transport import Flavored, operation
from corral_client.models import Node


class _NodesOps(Flavored):
    @operation
    def list(self) -> calls.Call[list[Node]]:
        """Live nodes, by id: cpu, memory, sandboxes, disk and pids, each with what is reserved of it."""
        return calls.list_nodes()


class Nodes(_NodesOps, flavor="sync"):
    pass


class AsyncNodes(_NodesOps, flavor="async"):
    pass
