"""SIGKILL one node-agent and watch the platform route around it. The shared platform keeps
one node less afterwards, so this runs after every other e2e test (``breaks_platform``)."""

import os
import signal
import time

import pytest

from tests.e2e.conftest import HEARTBEAT_TIMEOUT_S, agent_pid

pytestmark = pytest.mark.breaks_platform


def test_a_stopped_node_agent_is_not_given_up_and_its_sandboxes_run_on(platform, corral):
    """A node-agent whose whole process stalls (SIGSTOP here; direct reclaim on a host near its
    memory limit did it for 44 s) beats no heartbeat, its liveness pulse included, but its port
    still accepts: the reaper spares it within the wedge budget, and its sandboxes run on."""
    sandboxes = [corral.sandboxes.create("busybox", memory_mb=64, labels={"suite": "node-stall"}) for _ in range(4)]
    on_node_2 = [sb for sb in sandboxes if sb.info.node_id == "node-2"]
    assert on_node_2, "spread placement should use both nodes"
    pid = agent_pid(platform, "node-2")
    os.kill(pid, signal.SIGSTOP)
    try:
        stopped_at = time.monotonic()
        # Past two heartbeat timeouts silent (the reaper runs every second meanwhile)...
        while time.monotonic() - stopped_at < 2 * HEARTBEAT_TIMEOUT_S:
            for sb in on_node_2:
                assert sb.refresh().state == "running", (sb.id, sb.state, sb.info.reason)
            time.sleep(1)
    finally:
        os.kill(pid, signal.SIGCONT)
    # ...and back: its sandboxes never failed and answer.
    for sb in on_node_2:
        assert sb.exec("echo ok").stdout == "ok\n"
        assert sb.refresh().state == "running"
    for sb in sandboxes:
        sb.delete()


def test_killed_node_agent_fails_its_sandboxes_and_new_ones_go_elsewhere(platform, corral):
    sandboxes = [corral.sandboxes.create("busybox", memory_mb=64, labels={"suite": "node-loss"}) for _ in range(6)]
    on_node_2 = [sb for sb in sandboxes if sb.info.node_id == "node-2"]
    assert on_node_2, "spread placement should use both nodes"

    os.kill(agent_pid(platform, "node-2"), signal.SIGKILL)
    killed_at = time.monotonic()
    for sb in on_node_2:
        sb.wait("terminated", timeout=HEARTBEAT_TIMEOUT_S + 10)
        assert (sb.state, sb.info.reason) == ("failed", "node_lost")
    # The scheduler notices within the heartbeat timeout plus one reaper pass.
    assert time.monotonic() - killed_at < HEARTBEAT_TIMEOUT_S + 5

    fresh = [corral.sandboxes.create("busybox", memory_mb=64) for _ in range(4)]
    assert {sb.info.node_id for sb in fresh} == {"node-1"}
    for sb in fresh:
        assert sb.exec("echo ok").stdout == "ok\n"
    # Sandboxes on the surviving node never noticed.
    for sb in sandboxes:
        if sb.info.node_id == "node-1":
            assert sb.exec("echo ok").stdout == "ok\n"
    for sb in [*fresh, *sandboxes]:
        if sb.info.node_id == "node-1":
            sb.delete()
