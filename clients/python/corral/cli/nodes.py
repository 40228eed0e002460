"""``corral nodes``: the live nodes with a capacity bar per resource."""

import typer
from rich.table import Table

from corral.cli.context import get_state
from corral.cli.render import bar


def nodes_table(nodes: list) -> Table:
    table = Table("NODE", "BACKENDS", "CPU", "MEMORY", "SANDBOXES", "DISK", "BEAT")
    for n in nodes:
        table.add_row(
            n.node_id, ",".join(n.backends),
            bar(n.used_cpu, n.cpu) + f" {n.used_cpu:g}/{n.cpu:g}",
            bar(n.used_memory_mb, n.memory_mb) + f" {n.used_memory_mb}/{n.memory_mb} MiB",
            bar(n.used_sandboxes, n.max_sandboxes) + f" {n.used_sandboxes}/{n.max_sandboxes}",
            bar(n.used_disk_mb, n.disk_mb if isinstance(n.disk_mb, int) else None)
            + (f" {n.used_disk_mb}/{n.disk_mb} MiB" if isinstance(n.disk_mb, int) else ""),
            f"{n.heartbeat_age_s:.1f}s ago")
    return table


def nodes(ctx: typer.Context) -> None:
    """Live nodes: cpu, memory, sandboxes and disk, used of capacity."""
    state = get_state(ctx)
    with state.client() as corral:
        found = corral.nodes.list()
    state.emit(found, lambda _: state.out.print(nodes_table(found)))
