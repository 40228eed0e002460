"""The warm pools' settings (sandboxes/warm_pool.py), nested in the node's as ``warm_pool``."""

from pydantic import Field

from corral_node_agent.section import NodeSection, env_names


class WarmPoolSettings(NodeSection):
    section = "warm_pool"

    # Containers started ahead per shape creates ask for, so a create of that shape claims one
    # instead of starting it. How many a shape gets follows its demand: its creates in the last
    # minute less one (a one-off create gets none), and idle_s after its last create none. max
    # bounds the whole pool, every shape together (each pooled container is an idle init,
    # ~1.6 MiB of host memory and a few pids); the pool also fills only the slots
    # (max_sandboxes) and the requests (cpu, memory, pids) the node's sandboxes leave, and
    # gives them back to a create that needs them. 0 (with size 0): no warm pool (the default
    # until the scheduler's warm-first placement keeps spreading: with pools on, small creates
    # all went to the node whose pool was warm) ...
    max: int = Field(0, ge=0, le=4096, validation_alias=env_names("warm_pool", "max"))
    # ... and never fewer than size per shape once asked for (a fixed floor; 0: none; the pool
    # then holds up to 4 x size).
    size: int = Field(0, ge=0, le=4096, validation_alias=env_names("warm_pool", "size"))
    # A shape nobody asked for this long is drained to zero.
    idle_s: float = Field(120.0, gt=0, validation_alias=env_names("warm_pool", "idle_s"))
