"""Routing keys and the node-agent's data-path replies: the names and JSON other services rely on."""

from corral_common.contracts.display import InputSent, SnapshotRequest, SnapshotSaved
from corral_common.contracts.events import (
    SANDBOX_REQUESTED_KEY,
    node_queue_name,
    node_routing_key,
    state_routing_key,
    state_routing_keys,
)
from corral_common.contracts.exec import FileWritten
from corral_common.contracts.sandboxes import TERMINAL_STATES, SandboxState


def test_routing_keys():
    assert SANDBOX_REQUESTED_KEY == "sandbox.requested"
    assert state_routing_key(SandboxState.running) == "sandbox.running"
    assert sorted(state_routing_keys(TERMINAL_STATES)) == ["sandbox.failed", "sandbox.terminated"]
    assert node_routing_key("n1", "place") == "node.n1.place" == node_queue_name("n1", "place")
    assert node_routing_key("n1", "stop") == "node.n1.stop" == node_queue_name("n1", "stop")


def test_node_replies_keep_their_json():
    assert FileWritten(path="/home/user/a", size=4).model_dump_json() == '{"path":"/home/user/a","size":4}'
    assert InputSent(sent=2).model_dump_json() == '{"sent":2}'
    assert SnapshotSaved(size_bytes=7).model_dump_json() == '{"size_bytes":7}'
    assert SnapshotSaved.model_validate_json(b'{"size_bytes": 7}').size_bytes == 7
    assert SnapshotRequest(snapshot_id="snap-1").model_dump() == {"snapshot_id": "snap-1"}
