"""The node-agent's objects, built once in its lifespan (corral_node_agent.app, the composition
root) into one typed container on ``app.state.services``. A domain's router takes its part
through a dependency of its own that reads ``app.state.services`` (``sandboxes.router.get_manager``),
so no domain imports this module, which imports them all (the node-agent's one-way layering). The app's settings stay on
``app.state.settings`` too: the internal token's check (corral_common.web.internal) reads them there."""

from dataclasses import dataclass

from fastapi import FastAPI

from corral_node_agent.capacity.resources import NodeCapacity
from corral_node_agent.events.service import NodeEvents
from corral_node_agent.fncall.service import FncallPools
from corral_node_agent.metrics import NodeGauges
from corral_node_agent.sandboxes.service import SandboxManager
from corral_node_agent.settings import NodeAgentSettings


@dataclass
class Services:
    settings: NodeAgentSettings
    manager: SandboxManager
    # The control loop (bus consumer, heartbeat, pause/resume): the data path's pause goes through it.
    events: NodeEvents
    capacity: NodeCapacity
    gauges: NodeGauges
    # None until the pools have started (the last thing the lifespan starts).
    fncall: FncallPools | None = None


def services_of(app: FastAPI) -> Services | None:
    """The app's services; None before its lifespan built them."""
    return getattr(app.state, "services", None)
