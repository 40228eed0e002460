"""A node-agent SIGKILLed and started again re-adopts the sandboxes still running on its host.

Its sandboxes keep running while it is down (crun containers are not its children, and each
keeps its own mount namespace); the new process takes them over from crun's state and its
state dir. One whose init died meanwhile is marked failed (lost_on_restart) and cleaned up.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import redis

from tests.e2e.conftest import HEARTBEAT_TIMEOUT_S, agent_pid, leftovers, runtime_id
from tests.live_platform import fncall_ready, internal_headers, lazy_server_pid
from tests.polling import until_sync

NODE = "node-1"


def _crun_state(platform, sandbox) -> dict | None:
    root = platform["state"] / "nodes" / NODE / "crun"
    out = subprocess.run(["crun", "--root", str(root), "state", runtime_id(sandbox)], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else None


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _restart_agent(platform, before_start=None) -> float:
    """SIGKILL node-1's agent, run before_start() while it is down, start it again with the
    same environment (same id and state dir). Returns the seconds it was away."""
    run = platform["state"] / "run"
    old = agent_pid(platform, NODE)
    environ = dict(item.split("=", 1) for item in Path(f"/proc/{old}/environ").read_text().split("\0") if "=" in item)
    port = environ["CORRAL_NODE_PORT"]
    os.kill(old, signal.SIGKILL)
    t0 = time.monotonic()
    until_sync(lambda: not _alive(old), timeout_s=20, what="agent gone")
    if before_start is not None:
        before_start()
    log = open(platform["state"] / "logs" / f"{NODE}.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen([sys.executable, "-m", "corral_node_agent"], env=environ, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                            cwd=platform["state"])
    (run / f"{NODE}.pid").write_text(str(proc.pid))  # `down` stops this one

    def healthy() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    until_sync(healthy, timeout_s=30, what="agent back")
    return time.monotonic() - t0


def test_restarted_node_agent_readopts_running_sandboxes(platform, corral):
    sandboxes = [corral.sandboxes.create("busybox", memory_mb=64, labels={"suite": "node-restart"}) for _ in range(6)]
    mine = [sb for sb in sandboxes if sb.info.node_id == NODE]
    assert len(mine) >= 3, "spread placement should put half of them on node-1"
    keep, paused, doomed = mine[:3]
    keep.write_file("notes.txt", "before the restart")
    paused.write_file("state.txt", "frozen")
    paused.pause()
    pids = {sb.id: _crun_state(platform, sb)["pid"] for sb in (keep, paused, doomed)}

    def kill_doomed() -> None:
        # This one's processes die while nobody watches: the new agent must notice.
        os.kill(pids[doomed.id], signal.SIGKILL)
        until_sync(lambda: not _alive(pids[doomed.id]), timeout_s=20, what="doomed init gone")

    away = _restart_agent(platform, before_start=kill_doomed)
    # The scheduler's reaper would fail every sandbox of a node silent for longer.
    assert away < HEARTBEAT_TIMEOUT_S, f"agent took {away:.1f}s to come back"

    # The survivor: same init, its files and background process, exec and files work.
    assert _alive(pids[keep.id])
    assert keep.refresh().state == "running"
    # Its lazy layers are still served (the lazy-layer server outlived the agent): blocks
    # of its image nothing read before the restart read right.
    assert keep.exec("cat /etc/group").stdout == "root:x:0:\nuser:x:1000:\n"
    busybox = hashlib.sha256(Path("/bin/busybox").read_bytes()).hexdigest()
    assert keep.exec("sha256sum /bin/busybox").stdout.split()[0] == busybox
    assert keep.read_file("notes.txt") == b"before the restart"
    keep.write_file("after.txt", "written by the new agent")
    result = keep.exec("cat after.txt notes.txt")
    assert result.stdout == "written by the new agent" + "before the restart", result
    assert keep.exec("ps -o args").stdout.splitlines()[1] == "/dev/init -P"  # its PID 1, from before
    assert {f.name for f in keep.list_files(".")} >= {"notes.txt", "after.txt"}

    # The paused one is still frozen and thaws on request.
    assert paused.refresh().state == "paused"
    paused.resume()
    assert paused.exec("cat state.txt").stdout == "frozen"

    # The dead one is failed with a reason, and nothing of it is left.
    doomed.wait("terminated", timeout=15)
    assert (doomed.state, doomed.info.reason) == ("failed", "lost_on_restart")
    until_sync(lambda: not leftovers(platform, NODE, doomed), timeout_s=10, what="doomed cleaned up")

    # Nothing runs on the node without a live record, but its warm pool's containers (started
    # ahead, never claimed: "ahead" in their sandbox.json, adopted back into the pool). A
    # container's crun id is its sandbox's id, or the pooled one's it was claimed from: its
    # sandbox.json names its sandbox.
    root = platform["state"] / "nodes" / NODE / "crun"
    listed = json.loads(subprocess.run(["crun", "--root", str(root), "list", "--format", "json"],
                                       capture_output=True, text=True, check=True).stdout or "[]")
    records = redis.Redis.from_url(platform["redis_url"], decode_responses=True)  # any tenant's (the security
    for container in listed:  # suite's neighbours belong to another tenant)
        meta = json.loads((platform["state"] / "nodes" / NODE / "sandboxes" / container["id"] / "sandbox.json")
                          .read_text())
        if meta.get("ahead"):  # the pool's: it has the pool's record of it
            assert (platform["state"] / "nodes" / NODE / "owners" / "pooled" / f"{container['id']}.json").exists()
            continue
        sandbox_id = meta.get("sandbox_id") or container["id"]
        assert records.hget(f"sb:{sandbox_id}", "state") in ("running", "paused"), (container, sandbox_id)

    # Deleting an adopted sandbox leaves nothing: no container, mount, cgroup, dir or process.
    for sb in (keep, paused):
        sb.delete()
        assert sb.state == "terminated"
        assert not leftovers(platform, NODE, sb)
        until_sync(lambda sb=sb: not _alive(pids[sb.id]), timeout_s=5, what="init gone")
    mounts = [line for p in Path("/proc").glob("[0-9]*/mountinfo") for line in _read(p)
              if any(name in line for sb in (keep, paused, doomed) for name in (sb.id, runtime_id(sb)))]
    assert mounts == []
    for sb in sandboxes:
        if sb not in (keep, paused, doomed):
            sb.delete()


def _read(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def _fncall_on_node(platform, timeout_s: float) -> list[dict]:
    """Run a python call until NODE answers it accepted; every answer NODE gave, in order.
    (The node's pools compete with the other node's for the runtime's queue: calls alternate.)"""
    headers = {"Authorization": f"Bearer {platform['api_key']}"}
    body = {"runtime": "python", "code": "print(6 * 7)", "tests": [{"expected_stdout": "42\n"}]}
    answers: list[dict] = []
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=platform["api"], headers=headers, timeout=60) as api:
        while time.monotonic() < deadline:
            r = api.post("/v1/fncall", json=body)
            if r.status_code == 503:  # no worker took it (retryable): what a node re-mounting may answer
                answers.append({"verdict": "unavailable", "message": r.text[:300]})
                continue
            assert r.status_code == 200, r.text
            answer = r.json()
            if answer["node_id"] == NODE:
                answers.append(answer)
                if answer["verdict"] == "accepted":
                    return answers
    raise AssertionError(f"{NODE} answered no fncall accepted within {timeout_s}s: {answers[-5:]}")


def _on_node(corral, labels: dict) -> object:
    """A new busybox sandbox on NODE. Placement spreads by load: the ones that land elsewhere
    are kept until one lands here (deleting each at once would keep the other node the
    emptier one), then deleted."""
    elsewhere = []
    try:
        for _ in range(8):
            sb = corral.sandboxes.create("busybox", memory_mb=64, labels=labels)
            if sb.info.node_id == NODE:
                return sb
            elsewhere.append(sb)
        raise AssertionError(f"no sandbox landed on {NODE}")
    finally:
        for sb in elsewhere:
            sb.delete()


def test_a_killed_lazy_layer_server_fails_its_sandboxes_and_the_next_ones_work(platform, corral):
    # node-1's fncall pools run on the judge layer, which that server serves too.
    fncall_ready(platform)
    _fncall_on_node(platform, timeout_s=30)
    labels = {"suite": "lazy-server"}
    # One the agent adopts after a restart (its owner record names its layers), one after.
    adopted = _on_node(corral, labels)
    _restart_agent(platform)
    assert adopted.exec("cat /etc/group").stdout == "root:x:0:\nuser:x:1000:\n"
    fresh = _on_node(corral, labels)
    pid = lazy_server_pid(platform, NODE)
    os.kill(pid, signal.SIGKILL)
    until_sync(lambda: not _alive(pid), timeout_s=20, what="lazy-layer server gone")
    # The agent sees its server end and fails the sandboxes on its layers, with the reason.
    for victim in (adopted, fresh):
        victim.wait("terminated", timeout=30)
        assert (victim.state, victim.info.reason) == ("failed", "image_unavailable")

    # A server that dies while no agent runs: the restarted agent fails what read from it.
    lost = _on_node(corral, labels)
    assert lost.exec("cat /etc/group").stdout == "root:x:0:\nuser:x:1000:\n"

    def kill_server() -> None:
        server = lazy_server_pid(platform, NODE)
        os.kill(server, signal.SIGKILL)
        until_sync(lambda: not _alive(server), timeout_s=20, what="lazy-layer server gone")

    _restart_agent(platform, before_start=kill_server)
    lost.wait("terminated", timeout=30)
    assert (lost.state, lost.info.reason) == ("failed", "image_unavailable")

    # A new sandbox on the node gets a new server and reads its image.
    for _ in range(6):
        sb = corral.sandboxes.create("busybox", memory_mb=64, labels={"suite": "lazy-server"})
        on_node = sb.info.node_id == NODE
        if on_node:
            assert sb.exec("cat /etc/group").stdout == "root:x:0:\nuser:x:1000:\n"
            assert lazy_server_pid(platform, NODE) != pid
        sb.delete()
        if on_node:
            break
    else:
        raise AssertionError("no sandbox landed on node-1")
    # node-1's fncall pools mount the judge layer again from the new server, without an agent
    # restart; meanwhile a call is held or answered unavailable (503), never judged on the dead root.
    answers = _fncall_on_node(platform, timeout_s=60)
    assert all(a["verdict"] == "unavailable" for a in answers[:-1]), answers

    # The python pool answers as soon as it is up; the node says "ready" once every runtime's
    # pool is (the restarted agent starts them one after another: on a loaded host, after).
    def pools_status() -> str:
        status = httpx.get(f"{platform['urls'][NODE]}/v1/fncall/pools", headers=internal_headers(platform), timeout=5)
        return status.json()["status"]

    settled = until_sync(lambda: (s := pools_status()) != "starting" and s, timeout_s=180,
                         what="node-1's fncall pools to start")
    assert settled == "ready"
