"""The warm pools' settings (sandboxes/warm_pool.py), nested in the node's as ``warm_pool``."""

from pydantic import Field

from corral_node_agent.section import NodeSection, env_names


class WarmPoolSettings(NodeSection):
    section = "warm_pool"

    # Containers started ahead per shape creates ask for, so a create of that shape claims one
    # instead of starting it. Each costs what an idle sandbox costs (its requests count as used)
    # and holds one of the node's max_sandboxes until a create needs the slot. How many a shape
    # gets follows its demand: its creates in the last minute less one, up to max (0: no
    # demand-driven pool; not on by default yet: a claimed sandbox keeps its pooled crun id and
    # cgroup name, which the test harnesses that find a sandbox's processes by its id do not
    # know yet) ...
    max: int = Field(0, ge=0, le=4096, validation_alias=env_names("warm_pool", "max"))
    # ... and never fewer than size once asked for (a fixed floor; 0: none).
    size: int = Field(0, ge=0, le=4096, validation_alias=env_names("warm_pool", "size"))
    # A shape nobody asked for this long is drained to zero.
    idle_s: float = Field(120.0, gt=0, validation_alias=env_names("warm_pool", "idle_s"))
