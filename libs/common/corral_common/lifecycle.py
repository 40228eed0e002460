"""A state change is a Redis compare-and-set plus a ``sandbox.<state>`` event, always together."""

from typing import Any

from corral_common.amqp import EventBus
from corral_common.events import SandboxStateChanged
from corral_common.logging import get_logger
from corral_common.sandboxes import TERMINAL_STATES, SandboxState, Usage
from corral_common.state import StateStore

log = get_logger("corral.lifecycle")


async def transition(store: StateStore, bus: EventBus, sandbox_id: str, target: SandboxState, *,
                     reason: str | None = None, node_id: str | None = None, usage: Usage | None = None,
                     **fields: Any) -> bool:
    changed, previous = await store.transition(sandbox_id, target, reason=reason, node_id=node_id,
                                               usage=usage, **fields)
    if not changed:
        log.info("sandbox.transition_refused", sandbox_id=sandbox_id, target=target.value,
                 current=previous.value if previous else None)
        return False
    if target in TERMINAL_STATES:
        await store.release(sandbox_id)
    record = await store.get_sandbox(sandbox_id)
    await bus.publish(f"sandbox.{target.value}", SandboxStateChanged(
        sandbox_id=sandbox_id, tenant=record.tenant if record else "", state=target, reason=reason,
        node_id=node_id or (record.node_id if record else None), usage=usage,
    ))
    log.info("sandbox.transition", sandbox_id=sandbox_id, state=target.value, previous=previous.value if previous else None,
             reason=reason)
    return True
