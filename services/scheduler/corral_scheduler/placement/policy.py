"""Where a sandbox may go, best first. Pure functions: the placement unit tests live on these.
What a sandbox takes from a node is its requests (``SandboxSpec.reservation``), not its limits."""

from collections.abc import Collection, Mapping, Sequence

from corral_common.contracts.sandboxes import SandboxSpec
from corral_common.store.state_nodes import NodeInfo, cpu_milli


def runs_backend(node: NodeInfo, spec: SandboxSpec) -> bool:
    """The node advertises the sandbox's kind (container, microvm, vm)."""
    return spec.backend in node.backends


def holds_disk(disk_mb: int | None, spec: SandboxSpec) -> bool:
    """The sandbox's disk request fits in disk_mb (None: a node that does not advertise disk)."""
    return disk_mb is None or disk_mb >= spec.reservation.disk_mb


def fits(node: NodeInfo, spec: SandboxSpec) -> bool:
    return (runs_backend(node, spec) and node.free_cpu_milli >= cpu_milli(spec.reservation.cpu)
            and node.free_memory_mb >= node.reserved_memory_mb(spec) and node.free_sandboxes >= 1
            and (node.free_pids is None or node.free_pids >= node.reserved_pids(spec))
            and holds_disk(node.free_disk_mb, spec))


def measured_room(node: NodeInfo, spec: SandboxSpec, reserve_mb: int) -> bool:
    """Admission on measured use: the node's working set now (its heartbeat's ``memory``) plus
    the sandbox's reservation plus ``reserve_mb`` stay within the node's physical memory
    (``memory.limit_mb``, its cgroup's limit, before overcommit). Off (always True) with
    ``reserve_mb`` 0, or for a node that reports no measurement. Sandboxes placed since the last
    heartbeat are not in the working set yet: the reservation check in ``fits`` (claim x
    overcommit ratio) is what bounds such a burst."""
    measured = node.memory or {}
    if reserve_mb <= 0 or "limit_mb" not in measured or "working_set_mb" not in measured:
        return True
    return measured["working_set_mb"] + node.reserved_memory_mb(spec) + reserve_mb <= measured["limit_mb"]


def could_ever_fit(node: NodeInfo, spec: SandboxSpec) -> bool:
    """True if the node is big enough when empty; false means waiting will never help."""
    return (runs_backend(node, spec) and node.cpu_milli >= cpu_milli(spec.reservation.cpu)
            and node.memory_mb >= node.reserved_memory_mb(spec) and node.max_sandboxes >= 1
            and (node.pids is None or node.pids >= node.reserved_pids(spec))
            and holds_disk(node.disk_mb, spec))


def too_small(node: NodeInfo, spec: SandboxSpec) -> list[str]:
    """What the node lacks even when empty (empty: could_ever_fit)."""
    out = []
    if not runs_backend(node, spec):
        out.append(f"backend {spec.backend} (runs {', '.join(sorted(node.backends)) or 'none'})")
    if node.max_sandboxes < 1:
        out.append("sandbox slots (0)")
    if node.cpu_milli < cpu_milli(spec.reservation.cpu):
        out.append(f"cpu ({node.cpu_milli / 1000:g} < {spec.reservation.cpu:g})")
    if node.memory_mb < node.reserved_memory_mb(spec):
        out.append(f"memory ({node.memory_mb} MB < {node.reserved_memory_mb(spec)} MB)")
    if node.pids is not None and node.pids < node.reserved_pids(spec):
        out.append(f"pids ({node.pids} < {node.reserved_pids(spec)})")
    if not holds_disk(node.disk_mb, spec):
        out.append(f"disk ({node.disk_mb} MB < {spec.reservation.disk_mb} MB)")
    return out


def never_fits_reason(nodes: Sequence[NodeInfo], spec: SandboxSpec) -> str:
    """Why a request fails unschedulable, for its record's ``error``: what each live node lacks
    even when empty, e.g. ``no live node can ever hold it: node-1 (memory (20000 MB < 65536 MB))``."""
    parts = [f"{n.node_id} ({'; '.join(too_small(n, spec))})" for n in sorted(nodes, key=lambda n: n.node_id)[:8]]
    more = f"; {len(nodes) - 8} more" if len(nodes) > 8 else ""
    return "no live node can ever hold it: " + ", ".join(parts) + more


def short_of(node: NodeInfo, spec: SandboxSpec) -> list[str]:
    """What the node lacks right now to take the sandbox (empty: it fits)."""
    out = []
    if not runs_backend(node, spec):
        out.append(f"backend {spec.backend}")
    if node.free_sandboxes < 1:
        out.append(f"sandbox slots ({node.used_sandboxes}/{node.max_sandboxes})")
    if node.free_cpu_milli < cpu_milli(spec.reservation.cpu):
        out.append("cpu")
    if node.free_memory_mb < node.reserved_memory_mb(spec):
        out.append("memory")
    if node.free_pids is not None and node.free_pids < node.reserved_pids(spec):
        out.append("pids")
    if not holds_disk(node.free_disk_mb, spec):
        out.append("disk")
    return out


def waiting_reason(nodes: Sequence[NodeInfo], spec: SandboxSpec, busy: Collection[str] = ()) -> str:
    """Why a request that fits nowhere yet waits, for its record (GET /v1/sandboxes/{id}):
    what each live node is short of, e.g. ``waiting for room: node-1 full (sandbox slots
    (2/2)); node-2 full (memory, pids)``; ``busy``: nodes whose full heartbeat is late."""
    if not nodes:
        return "waiting for room: no live node"
    parts = [f"{n.node_id} busy (heartbeat late)" if n.node_id in busy
             else f"{n.node_id} full ({', '.join(short_of(n, spec)) or 'reserved meanwhile'})"
             for n in sorted(nodes, key=lambda n: n.node_id)[:8]]
    more = f"; {len(nodes) - 8} more" if len(nodes) > 8 else ""
    return "waiting for room: " + "; ".join(parts) + more


def load(n: NodeInfo) -> float:
    """How full a node is, 0..1: the scarcest of memory, cpu, sandbox slots, pids and disk."""
    return max(n.used_memory_mb / max(n.memory_mb, 1), n.used_cpu_milli / max(n.cpu_milli, 1),
               n.used_sandboxes / max(n.max_sandboxes, 1), n.used_pids / n.pids if n.pids else 0.0,
               n.used_disk_mb / max(n.disk_mb or 0, 1))


def rank_nodes(nodes: Sequence[NodeInfo], spec: SandboxSpec, strategy: str = "spread",
               measured_reserve_mb: int = 0) -> list[NodeInfo]:
    candidates = [n for n in nodes if fits(n, spec) and measured_room(n, spec, measured_reserve_mb)]
    reverse = strategy == "pack"
    return sorted(candidates, key=lambda n: (load(n), n.node_id), reverse=reverse)


def by_warm_pool(ranked: Sequence[NodeInfo], shape: str | None, slack: float) -> list[NodeInfo]:
    """``ranked`` with the nodes whose warm pool has a container of the sandbox's ``shape``
    ready first, among those whose load is within ``slack`` of the best one's: such a node
    claims one instead of starting it. The counts are the last heartbeat's, so a burst may
    find one emptied meanwhile (that node then starts the sandbox itself)."""
    if shape is None or not ranked or not any(n.warm.get(shape) for n in ranked):
        return list(ranked)
    best = load(ranked[0])
    near = [n for n in ranked if load(n) - best <= slack]
    far = [n for n in ranked if load(n) - best > slack]
    return sorted(near, key=lambda n: not n.warm.get(shape)) + far


def held_bytes(layers: Mapping[str, int], held: Mapping[str, int]) -> int:
    """Bytes of an environment (layer digest -> size) a node already holds."""
    return sum(min(size, held.get(digest, 0)) for digest, size in layers.items())


def warmth(layers: Mapping[str, int], held: Mapping[str, int]) -> int:
    """How much of an environment a node holds, coarsely: 2 at least half its bytes, 1 some,
    0 none. Coarse on purpose: two nodes that both ran an image (a lazy node caches only the
    chunks its sandboxes read, so their byte counts always differ a little) stay equals and
    are spread by load, instead of one of them taking every sandbox of the image."""
    total = sum(layers.values())
    have = held_bytes(layers, held)
    return 0 if have == 0 else 2 if 2 * have >= total else 1


def by_locality(ranked: Sequence[NodeInfo], layers: Mapping[str, int],
                held_by_node: Mapping[str, Mapping[str, int]], slack: float = 1.0) -> list[NodeInfo]:
    """``ranked`` (best first by the strategy's load order) with the nodes holding most of the
    environment's bytes (``warmth``) first: a node that holds them starts a sandbox without
    fetching them. Equal warmth keeps the load order. Only nodes whose load is within
    ``slack`` of the best one's compete on locality (1.0: every node), so a burst of one image
    does not pile onto the one node that held it first while others sit idle."""
    if not layers or not ranked:
        return list(ranked)
    best = load(ranked[0])
    near = [n for n in ranked if abs(load(n) - best) <= slack]
    far = [n for n in ranked if abs(load(n) - best) > slack]
    return sorted(near, key=lambda n: -warmth(layers, held_by_node.get(n.node_id, {}))) + far
