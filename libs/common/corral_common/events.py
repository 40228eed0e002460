"""Event names and payloads on the ``corral`` topic exchange.

Routing keys:
- ``sandbox.requested``          api → scheduler (a new sandbox to place)
- ``node.<node_id>.place``       scheduler → that node's agent (start it)
- ``node.<node_id>.stop``        api → that node's agent (stop it)
- ``sandbox.<state>``            whoever made the transition → anyone (api records terminal ones)
"""

from datetime import UTC, datetime
from uuid import uuid4

from pydantic import BaseModel, Field

from corral_common.sandboxes import SandboxSpec, SandboxState, Usage

EXCHANGE = "corral"


def node_routing_key(node_id: str, action: str) -> str:
    return f"node.{node_id}.{action}"


def _now() -> datetime:
    return datetime.now(UTC)


class Event(BaseModel):
    event_id: str = Field(default_factory=lambda: uuid4().hex)
    at: datetime = Field(default_factory=_now)


class SandboxRequested(Event):
    sandbox_id: str
    tenant: str
    spec: SandboxSpec
    # Only this node may take it (a restored snapshot lives on one node's disk).
    node_id: str | None = None


class SandboxPlace(Event):
    sandbox_id: str
    tenant: str
    node_id: str
    spec: SandboxSpec


class SandboxStop(Event):
    sandbox_id: str
    node_id: str
    reason: str = "deleted"


class SandboxStateChanged(Event):
    sandbox_id: str
    tenant: str
    state: SandboxState
    reason: str | None = None
    node_id: str | None = None
    usage: Usage | None = None
