"""The node-agent's data-path activity per sandbox (what the memory-manager's idle rule reads):
calls in flight, seconds since the last ended, housekeeping not counted, streams counted while
read, and sandboxes gone forgotten."""

import pytest

from corral_node_agent.sandboxes.activity import ActivityTracker


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_idle_counts_from_first_sight_and_from_the_end_of_each_call():
    clock = Clock()
    tracker = ActivityTracker(clock)
    assert tracker.snapshot({"s": "vm"})[0].idle_s == 0.0  # first sight: never idle longer than known
    clock.now = 130.0
    assert tracker.snapshot({"s": "vm"})[0].idle_s == 30.0
    with tracker.call("s"):
        clock.now = 140.0
        busy = tracker.snapshot({"s": "vm"})[0]
        assert (busy.calls_in_flight, busy.idle_s, busy.kind) == (1, 0.0, "vm")
    clock.now = 145.0
    assert tracker.snapshot({"s": "vm"})[0].idle_s == 5.0


def test_housekeeping_is_not_use():
    clock = Clock()
    tracker = ActivityTracker(clock)
    tracker.snapshot({"s": "vm"})
    clock.now = 160.0
    with tracker.call("s", counted=False):
        assert tracker.snapshot({"s": "vm"})[0].calls_in_flight == 0
    assert tracker.snapshot({"s": "vm"})[0].idle_s == 60.0


def test_a_failing_call_still_ends():
    tracker = ActivityTracker(Clock())
    with pytest.raises(RuntimeError), tracker.call("s"):
        raise RuntimeError("exec failed")
    assert tracker.snapshot({"s": "container"})[0].calls_in_flight == 0


async def test_a_stream_counts_while_it_is_read_and_closes_its_source():
    clock = Clock()
    tracker = ActivityTracker(clock)
    closed = []

    async def chunks():
        try:
            yield 1
            yield 2
        finally:
            closed.append(True)
    stream = tracker.stream("s", chunks())
    assert await anext(stream) == 1
    assert tracker.snapshot({"s": "container"})[0].calls_in_flight == 1
    await stream.aclose()
    assert tracker.snapshot({"s": "container"})[0].calls_in_flight == 0 and closed


def test_sandboxes_gone_are_forgotten():
    tracker = ActivityTracker(Clock())
    tracker.snapshot({"a": "vm", "b": "container"})
    assert [a.sandbox_id for a in tracker.snapshot({"b": "container"})] == ["b"]
    assert "a" not in tracker._uses


def test_the_activity_route_needs_the_internal_token_and_lists_live_sandboxes():
    from types import SimpleNamespace

    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from corral_common.web.handlers import install_error_handlers
    from corral_node_agent.sandboxes.router import activity_router

    tracker = ActivityTracker(Clock())
    manager = SimpleNamespace(activity_snapshot=lambda: tracker.snapshot({"vm-1": "vm"}))
    app = FastAPI()
    app.state.settings = SimpleNamespace(internal_token="tok")
    app.state.services = SimpleNamespace(manager=manager)
    install_error_handlers(app)
    app.include_router(activity_router)
    client = TestClient(app)
    assert client.get("/v1/activity").status_code == 401
    resp = client.get("/v1/activity", headers={"X-Corral-Internal-Token": "tok"})
    assert resp.status_code == 200
    assert resp.json() == [{"sandbox_id": "vm-1", "kind": "vm", "calls_in_flight": 0, "idle_s": 0.0,
                            "cgroup": None}]


def test_in_flight_counts_every_sandboxs_calls_running_now():
    """(What the warm pool waits on before it starts a container ahead.)"""
    tracker = ActivityTracker(Clock())
    assert tracker.in_flight() == 0
    with tracker.call("a"), tracker.call("a"), tracker.call("b"), tracker.call("c", counted=False):
        assert tracker.in_flight() == 3
    assert tracker.in_flight() == 0
