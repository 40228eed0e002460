"""What the SDK sends: only the spec fields a caller gave (a restore must not contradict its
snapshot with defaults), and input events in the api's shape."""

from corral._common import click_event, create_body, input_body, key_event, move_event, text_event
from corral_api.sandboxes.schemas import SandboxCreate
from corral_common.contracts.display import InputRequest


def test_create_body_sends_only_what_was_given():
    assert create_body(from_snapshot="snap-1").to_dict() == {"from_snapshot": "snap-1"}
    body = create_body("busybox", isolation="vm", memory_mb=512, labels={"a": "b"}).to_dict()
    assert body == {"environment": "busybox", "isolation": "vm", "memory_mb": 512, "labels": {"a": "b"}}
    assert SandboxCreate.model_validate(body).backend == "microvm"


def test_input_helpers_make_valid_input_requests():
    events = [key_event("ctrl", "c"), text_event("ls\n"), move_event(10, 20), click_event(), click_event(5, 6, "right")]
    request = InputRequest.model_validate(input_body(events))
    assert [e.type for e in request.events] == ["key", "text", "mouse_move", "click", "click"]
    assert (request.events[3].x, request.events[4].button, request.events[4].y) == (None, "right", 6)


def test_create_body_carries_network_both_ways():
    from corral_client.models.sandbox import Sandbox as SandboxInfo
    from corral_common.contracts.network import NetworkPolicy

    body = create_body("busybox", network={"presets": ["pypi"], "allow": ["git.example.org:443"]}).to_dict()
    spec = SandboxCreate.model_validate(body)
    assert spec.network == NetworkPolicy(presets=["pypi"], allow=["git.example.org:443"])
    assert SandboxCreate.model_validate(create_body("busybox", network="none").to_dict()).network == "none"
    assert "network" not in create_body("busybox").to_dict()
    info = {"id": "sb-1", "state": "running", "environment": "busybox", "backend": "container", "cpu": 1.0,
            "memory_mb": 256, "disk_mb": 1024, "timeout_s": 60, "created_at": "2026-12-01T00:00:00Z",
            "network": {"allow": ["a.test"], "presets": [], "bandwidth_mbit": None}}
    assert SandboxInfo.from_dict(info).network.allow == ["a.test"]
    assert SandboxInfo.from_dict({**info, "network": "none"}).network == "none"
