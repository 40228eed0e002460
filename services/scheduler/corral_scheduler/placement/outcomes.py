"""What one placement attempt came to, so a caller (the job admitter) needs no second read."""

from enum import StrEnum

from corral_common.contracts.sandboxes import TERMINAL_STATES, SandboxState
from corral_common.store.state_records import SandboxRecord


class PlaceOutcome(StrEnum):
    placed = "placed"  # this attempt reserved room, marked it scheduled and sent it to the node
    already_placed = "already_placed"  # placed before (a redelivery, another scheduler): sent again if still scheduled
    ended = "ended"  # it ended after a node had it (ran and stopped, or failed there)
    dropped = "dropped"  # ended before any node had it: deleted while pending, or its record is gone
    failed = "failed"  # can never be placed: unschedulable, or its required node is not live
    no_room = "no_room"  # still pending: no node has room now

    def __bool__(self) -> bool:
        """True when the request needs no more work (every outcome but ``no_room``)."""
        return self is not PlaceOutcome.no_room

    @property
    def on_node(self) -> bool:
        """A node has (or had) it: it counts as admitted, not dropped."""
        return self in (PlaceOutcome.placed, PlaceOutcome.already_placed, PlaceOutcome.ended)


def settled_outcome(record: SandboxRecord | None) -> PlaceOutcome:
    """The outcome of a sandbox that another hand moved on from pending (or that is gone)."""
    if record is None:
        return PlaceOutcome.dropped
    if record.state in TERMINAL_STATES:
        return PlaceOutcome.ended if record.node_id else PlaceOutcome.dropped
    if record.state is SandboxState.pending:
        return PlaceOutcome.no_room  # not settled after all: try it again
    return PlaceOutcome.already_placed
