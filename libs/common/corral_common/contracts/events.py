"""Event names and payloads on the ``corral`` topic exchange.

Routing keys (made by the helpers below, never spelled out elsewhere):
- ``sandbox.requested``          api → scheduler (a new sandbox to place): ``SANDBOX_REQUESTED_KEY``
- ``node.<node_id>.place``       scheduler → that node's agent (start it): ``node_routing_key``
- ``node.<node_id>.stop``        api → that node's agent (stop it): ``node_routing_key``
- ``sandbox.<state>``            whoever made the transition → anyone (api records terminal ones):
                                 ``state_routing_key``
"""

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Literal
from uuid import uuid4

from pydantic import BaseModel, Field

from corral_common.contracts.images import ResolvedImage
from corral_common.contracts.sandboxes import SandboxSpec, SandboxState, Usage

EXCHANGE = "corral"

SANDBOX_REQUESTED_KEY = "sandbox.requested"
NodeAction = Literal["place", "stop"]


def state_routing_key(state: SandboxState) -> str:
    return f"sandbox.{state.value}"


def state_routing_keys(states: Iterable[SandboxState]) -> list[str]:
    return [state_routing_key(state) for state in states]


def node_routing_key(node_id: str, action: NodeAction) -> str:
    return f"node.{node_id}.{action}"


def node_queue_name(node_id: str, action: NodeAction) -> str:
    """The durable queue a node consumes ``action`` from; named as its routing key (renaming
    it would strand the messages waiting in the old queue)."""
    return node_routing_key(node_id, action)


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
    # Its environment as the api resolved it (the record's ``image``; None: not pinned).
    image: ResolvedImage | None = None


class SandboxPlace(Event):
    sandbox_id: str
    tenant: str
    node_id: str
    spec: SandboxSpec


class SandboxStop(Event):
    sandbox_id: str
    node_id: str
    reason: str = "deleted"


SANDBOX_NETWORK_DENIED_KEY = "sandbox.network.denied"


class NetworkDenial(BaseModel):
    at: float  # epoch seconds
    target: str  # host:port, an address:port, or dns:<name>
    reason: str


class SandboxNetworkDenied(Event):
    """Connections or DNS queries of a sandbox its egress rules refused (coalesced: at most one
    event per sandbox per second, ``count`` refusals, the latest ones in ``recent``)."""

    sandbox_id: str
    tenant: str = ""
    node_id: str
    count: int
    recent: list[NetworkDenial] = Field(default_factory=list)


class SandboxStateChanged(Event):
    sandbox_id: str
    tenant: str
    state: SandboxState
    reason: str | None = None
    node_id: str | None = None
    usage: Usage | None = None
    # Terminal events: the record as it ended (its Redis hash), so that its history is written
    # even when Redis lost it before the api read it.
    record: dict[str, str] | None = None
