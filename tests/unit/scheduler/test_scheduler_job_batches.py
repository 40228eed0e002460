"""The job admitter's batch sizing and what a placement attempt's outcome means for the queue."""

import pytest

from corral_common.contracts.sandboxes import SandboxSpec, SandboxState
from corral_common.store.state_records import SandboxRecord
from corral_scheduler.jobs.service import MAX_BATCH, next_batch_size
from corral_scheduler.placement.outcomes import PlaceOutcome, settled_outcome


def test_a_batch_that_fits_whole_doubles_up_to_the_cap():
    assert next_batch_size(1, tried=1, placed=1, no_room=0) == 2
    assert next_batch_size(4, tried=4, placed=4, no_room=0) == 8
    assert next_batch_size(MAX_BATCH, tried=MAX_BATCH, placed=MAX_BATCH, no_room=0) == MAX_BATCH
    # Settled without taking room (deleted while queued, unschedulable): no room was missing.
    assert next_batch_size(8, tried=8, placed=0, no_room=0) == 16


def test_a_batch_part_of_which_found_no_room_shrinks_to_what_fitted():
    assert next_batch_size(MAX_BATCH, tried=12, placed=5, no_room=7) == 5
    assert next_batch_size(5, tried=5, placed=0, no_room=5) == 1  # the head then waits alone
    assert next_batch_size(1, tried=1, placed=0, no_room=1) == 1


def test_a_short_queue_keeps_the_size_for_the_next_burst():
    assert next_batch_size(MAX_BATCH, tried=3, placed=3, no_room=0) == MAX_BATCH
    assert next_batch_size(4, tried=2, placed=2, no_room=0) == 4


def test_only_no_room_needs_more_work_and_only_what_a_node_had_counts_as_admitted():
    assert [o for o in PlaceOutcome if not o] == [PlaceOutcome.no_room]
    assert {o for o in PlaceOutcome if o.on_node} == {PlaceOutcome.placed, PlaceOutcome.already_placed,
                                                      PlaceOutcome.ended}


def record(state: SandboxState, node_id: str | None = None) -> SandboxRecord:
    return SandboxRecord(id="sb-1", tenant="t1", state=state, spec=SandboxSpec(environment="e"), created_at=0.0,
                         updated_at=0.0, node_id=node_id)


@pytest.mark.parametrize(("state", "node_id", "outcome"), [
    (SandboxState.terminated, None, PlaceOutcome.dropped),  # deleted while queued
    (SandboxState.failed, None, PlaceOutcome.dropped),  # failed before any node had it
    (SandboxState.terminated, "n1", PlaceOutcome.ended),  # ran and ended meanwhile
    (SandboxState.failed, "n1", PlaceOutcome.ended),  # node_lost, say
    (SandboxState.scheduled, "n1", PlaceOutcome.already_placed),  # another scheduler won
    (SandboxState.running, "n1", PlaceOutcome.already_placed),
    (SandboxState.pending, None, PlaceOutcome.no_room),  # not settled: try again
])
def test_a_sandbox_another_hand_moved_on_settles_by_its_record(state, node_id, outcome):
    assert settled_outcome(record(state, node_id)) is outcome


def test_a_record_that_is_gone_is_dropped():
    assert settled_outcome(None) is PlaceOutcome.dropped
