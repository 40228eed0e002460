"""Requests no node could ever hold are refused before anything is created (422).

Today that is the disk: ``disk_mb`` above the operator's ``max_disk_mb``, or above what the
largest live node that runs the sandbox's kind advertises. cpu and memory that no node has
are still found by the scheduler (the sandbox fails as ``unschedulable``); a disk that big
would otherwise wait in the queue for a node that does not exist.
"""

from corral_common.errors import Unprocessable
from corral_common.sandboxes import SandboxSpec
from corral_common.state import StateStore


async def check_disk(store: StateStore, spec: SandboxSpec, *, max_disk_mb: int, heartbeat_timeout_s: float) -> None:
    """Unprocessable (code ``disk_too_large``) when spec.disk_mb cannot be held anywhere.
    With no live node advertising a disk, only the operator's maximum applies."""
    if max_disk_mb and spec.disk_mb > max_disk_mb:
        raise Unprocessable(f"disk_mb={spec.disk_mb} is over this deployment's maximum of {max_disk_mb}",
                            loc=["body", "disk_mb"], code="disk_too_large")
    nodes = [n for n in await store.live_nodes(heartbeat_timeout_s)
             if spec.backend in n.backends and n.disk_mb is not None]
    if not nodes:
        return
    largest = max(n.disk_mb or 0 for n in nodes)
    if spec.disk_mb > largest:
        raise Unprocessable(f"disk_mb={spec.disk_mb} is more than any node can hold (the largest {spec.backend} "
                            f"node has {largest} MiB for sandbox disks)", loc=["body", "disk_mb"],
                            code="disk_too_large")
