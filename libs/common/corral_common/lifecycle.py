"""A state change is a Redis compare-and-set plus a ``sandbox.<state>`` event, always together."""

from typing import Any

from corral_common.amqp import EventBus
from corral_common.contracts.events import SandboxStateChanged, state_routing_key
from corral_common.contracts.sandboxes import TERMINAL_STATES, SandboxState, Usage
from corral_common.logging import get_logger
from corral_common.store.state import StateStore

log = get_logger(__name__)


async def transition(store: StateStore, bus: EventBus, sandbox_id: str, target: SandboxState, *,
                     reason: str | None = None, node_id: str | None = None, usage: Usage | None = None,
                     **fields: Any) -> bool:
    changed, previous, tenant, recorded_node, ended = await store.transition_ex(
        sandbox_id, target, reason=reason, node_id=node_id, usage=usage, **fields)
    if not changed:
        log.info("sandbox.transition_refused", sandbox_id=sandbox_id, target=target.value,
                 current=previous.value if previous else None)
        return False
    terminal = target in TERMINAL_STATES
    if terminal:
        await store.release(sandbox_id)
    # Terminal events feed the SQL history, so they wait for the broker's confirm (and carry
    # the record). The others
    # only wake waiters (who re-read Redis anyway), so they skip that round trip. The change is
    # made: a broker that is away defers its event (sent once it is back), never fails it.
    await bus.publish(state_routing_key(target), SandboxStateChanged(
        sandbox_id=sandbox_id, tenant=tenant, state=target, reason=reason, node_id=node_id or recorded_node,
        usage=usage, record=ended.to_hash() if ended else None,
    ), confirm=terminal, defer_on_outage=True)
    log.info("sandbox.transition", sandbox_id=sandbox_id, state=target.value, previous=previous.value if previous else None,
             reason=reason)
    return True
