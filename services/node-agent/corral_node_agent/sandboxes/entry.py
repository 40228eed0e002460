"""What the node-agent knows of one sandbox of its own, from its create until it is gone."""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from corral_common.contracts.images import EnvironmentLayer
from corral_common.contracts.sandboxes import SandboxSpec
from corral_node_agent.backends.types import LayerFormat


@dataclass
class SandboxEntry:
    spec: SandboxSpec
    # Whose environment names the spec's (a tenant's own shadow the shared catalogue's).
    tenant: str = ""
    kind: str = "container"
    # The environment's layers as the api resolved them for this create (its record's pinned
    # image): what it starts on, and part of its warm pool shape. None: no environment.
    pinned: tuple[EnvironmentLayer, ...] | None = None
    # What it holds (acquired), released when it ends.
    layers: Sequence[EnvironmentLayer] = ()
    # How the layers were acquired: release the same way.
    layer_format: LayerFormat = LayerFormat.mounts
    disk_image: str | None = None
    runtime: dict[str, str] = field(default_factory=dict)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    error: BaseException | None = None
