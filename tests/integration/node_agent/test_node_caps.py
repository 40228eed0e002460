"""The node's cgroup caps (cgroups/node.py) against real crun: fork bombs and memory hogs stay
inside the node's share of the host, and a neighbour the scheduler placed can still fork."""

import asyncio
import contextlib
import subprocess
import uuid

import pytest
import pytest_asyncio

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec
from corral_host.cgroups import node as node_cgroup
from corral_host.cgroups.detect import cgroup_driver
from corral_node_agent.backends.container import ContainerBackend
from corral_node_agent.backends.types import RootFs
from corral_node_agent.settings import NodeAgentSettings
from tests.polling import until

pytestmark = pytest.mark.asyncio
MIB = 1024 * 1024
# Forks until a fork fails (busybox sh then exits), leaving its sleepers holding the pids.
BOMB = "while :; do sleep 1000 & done"


@pytest_asyncio.fixture
async def capped(state_dir, node_id, base_layer):
    """``capped(memory_mb, pids)``: a container backend on a node whose cgroup is capped so."""
    made = []

    def make(memory_mb: int, pids: int) -> tuple[ContainerBackend, object]:
        settings = NodeAgentSettings(node_id=f"{node_id}-cap-{uuid.uuid4().hex[:4]}", state_dir=state_dir)
        group = node_cgroup.cap(cgroup_driver(), settings.node_id, memory_mb * MIB, pids)
        if group is None:
            pytest.skip("needs cgroup v1 memory, pids and cpuacct")
        backend = ContainerBackend(settings)
        made.append((backend, group))
        return backend, group

    yield make
    for backend, group in made:
        await backend.close()
        assert not any(d.exists() for d in group.dirs.values())  # pruned once idle


async def start(backend, base_layer, **spec) -> str:
    sid = "cap-" + uuid.uuid4().hex[:8]
    spec.setdefault("memory_mb", 128)
    await backend.start(sid, SandboxSpec(environment="busybox", **spec), RootFs([base_layer]))
    return sid


def pids_current(group) -> int:
    return int((group.dirs["pids"] / "pids.current").read_text())


def pids_peak(group) -> int:
    return int((group.dirs["pids"] / "pids.peak").read_text())


def bomb(backend, sid) -> asyncio.Task:
    return asyncio.create_task(backend.exec(sid, ExecRequest(cmd=BOMB, timeout_s=60)))


async def end(backend, sid, task: asyncio.Task) -> None:
    await backend.stop(sid)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(task, 30)


async def test_a_fork_bomb_cannot_push_the_node_past_its_cap(capped, base_layer):
    """Even a sandbox whose own pids_limit is far above the node's cap (the api and the
    scheduler would refuse it; here the backend is asked directly) stops at the node's cap."""
    backend, group = capped(memory_mb=1024, pids=96)
    sid = await start(backend, base_layer, pids_limit=4096)
    task = bomb(backend, sid)
    await until(lambda: pids_peak(group) == 96, timeout_s=30, what="the bomb to fill the node's pids cap")
    result = await asyncio.wait_for(task, 30)
    assert result.exit_code != 0 and "can't fork" in result.stderr  # stopped by the node, far below its pids_limit
    assert pids_current(group) <= 96 and pids_peak(group) == 96
    # The host outside the node is untouched: it still forks.
    assert subprocess.run(["sh", "-c", "true & wait"], timeout=10).returncode == 0
    await end(backend, sid, task)
    await until(lambda: pids_current(group) == 0, timeout_s=30, what="the node's cgroup to empty")


async def test_a_neighbour_within_the_nodes_pids_can_still_fork_during_a_bomb(capped, base_layer):
    """With the sandboxes' pids_limits adding up to no more than the node's cap (what the
    scheduler's reservations keep), one sandbox's fork bomb takes only its own."""
    backend, group = capped(memory_mb=1024, pids=160)
    bomber = await start(backend, base_layer, pids_limit=96)
    neighbour = await start(backend, base_layer, pids_limit=48)
    bomber_cgroup = backend._sandboxes[bomber].cgroup
    task = bomb(backend, bomber)
    await until(lambda: pids_peak(bomber_cgroup) == 96, timeout_s=30, what="the bomb to fill its pids_limit")
    r = await backend.exec(neighbour, ExecRequest(
        cmd='p=""; for i in $(seq 20); do sleep 1000 & p="$p $!"; done; set -- $p; echo $#; kill $p', timeout_s=30))
    assert r.exit_code == 0 and r.stdout.strip() == "20", r
    assert pids_current(bomber_cgroup) >= 90 and pids_peak(group) < 160  # the node's cap was never reached
    await end(backend, bomber, task)


async def test_the_nodes_memory_cap_is_a_backstop_below_the_sandboxes_limits(capped, base_layer):
    """A node whose sandboxes' memory limits add up past its claim (memory_overcommit > 1)
    still stops at its claim: the node's own cgroup OOM-kills, the host never has to."""
    backend, group = capped(memory_mb=96, pids=512)
    sid = await start(backend, base_layer, memory_mb=512, pids_limit=64)
    r = await backend.exec(sid, ExecRequest(cmd="awk 'BEGIN { s = \"x\"; while (1) s = s s }'", timeout_s=60))
    assert r.exit_code == 137
    peak = int((group.dirs["memory"] / "memory.max_usage_in_bytes").read_text())
    assert peak <= 96 * MIB
    assert (await backend.exec(sid, ExecRequest(cmd="echo alive", timeout_s=10))).stdout == "alive\n"


# Doubles a string to 128 MiB (192 MiB at the last step), then spins a core.
HOG = "awk 'BEGIN { s = \"x\"; while (length(s) < 134217728) s = s s; while (1) {} }'"


async def test_a_storm_of_default_sandboxes_waking_at_once_is_oom_killed_inside_the_node(capped, base_layer):
    """The storm, scaled down: default sandboxes (limits 256 MiB and a core each, requests
    2 MiB) on a node of 256 MiB all allocate toward their limits and spin at once. The node's
    cgroup OOM-kills inside the node (its peak stays at its cap), the kernel takes the sandboxes'
    hogs (SANDBOX_OOM_SCORE_ADJ), never their inits, and afterwards every sandbox answers."""
    backend, group = capped(memory_mb=256, pids=512)
    ids = []
    for _ in range(4):
        sid = "storm-" + uuid.uuid4().hex[:8]
        await backend.start(sid, SandboxSpec(environment="busybox"), RootFs([base_layer]))  # the default spec
        ids.append(sid)
    results = await asyncio.gather(*(backend.exec(sid, ExecRequest(cmd=HOG, timeout_s=20)) for sid in ids))
    codes = [r.exit_code for r in results]
    assert codes.count(137) >= 1, codes  # OOM-killed (SIGKILL), not left to take the host's memory
    peak = int((group.dirs["memory"] / "memory.max_usage_in_bytes").read_text())
    assert peak <= 256 * MIB
    for sid in ids:  # every sandbox is still there and answers
        r = await backend.exec(sid, ExecRequest(cmd="echo alive", timeout_s=10))
        assert r.stdout == "alive\n", (sid, r)
    assert subprocess.run(["sh", "-c", "true & wait"], timeout=10).returncode == 0  # the host forks
    for sid in ids:
        await backend.stop(sid)


async def test_a_sandbox_is_first_for_the_oom_killer_and_cannot_change_that(capped, base_layer):
    from corral_node_agent.isolation.policy import SANDBOX_OOM_SCORE_ADJ

    backend, _ = capped(memory_mb=512, pids=512)
    sid = await start(backend, base_layer)
    r = await backend.exec(sid, ExecRequest(cmd="cat /proc/self/oom_score_adj /proc/1/oom_score_adj", timeout_s=10))
    assert r.stdout.split() == [str(SANDBOX_OOM_SCORE_ADJ)] * 2, r  # execs and its init
    for user in ("user", "root"):  # root inside has no CAP_SYS_RESOURCE: it cannot lower it either
        r = await backend.exec(sid, ExecRequest(cmd="echo -1000 > /proc/self/oom_score_adj && cat /proc/self/oom_score_adj",
                                                user=user, timeout_s=10))
        assert r.exit_code != 0, (user, r)
    await backend.stop(sid)


async def test_under_contention_cpu_goes_by_request_not_by_head_count(capped, base_layer):
    """Four default sandboxes (requests 0.001 core) spin a core each beside one that asked for
    half a core, on two cores: the one that asked gets its core (its limit), the four share
    what is left. With equal weights (the cgroup default) each of the five got 2/5 of a core."""
    from corral_host.cgroups.node import sandbox_cgroup_path

    backend, _ = capped(memory_mb=2048, pids=4096)
    crowd = [await start(backend, base_layer, memory_mb=64) for _ in range(4)]
    asked = await start(backend, base_layer, memory_mb=64, requests={"cpu": 0.5})
    spin = "timeout 4 sh -c 'while :; do :; done'"
    driver = cgroup_driver()
    groups = {sid: driver.cgroup(sandbox_cgroup_path(backend.settings.node_id, sid)) for sid in [*crowd, asked]}
    try:
        runs = [asyncio.create_task(backend.exec(sid, ExecRequest(cmd=spin, timeout_s=20))) for sid in groups]
        await asyncio.sleep(1.0)  # noqa: ASYNC251 - a measuring window, not a synchronisation
        before = {sid: g.cpu_ms() for sid, g in groups.items()}
        await asyncio.sleep(2.0)  # noqa: ASYNC251 - the window
        used = {sid: g.cpu_ms() - before[sid] for sid, g in groups.items()}
        await asyncio.gather(*runs)
    finally:
        for sid in groups:
            await backend.stop(sid)
    crowd_mean = sum(used[sid] for sid in crowd) / len(crowd)
    print(f"cpu ms in 2 s: asked {used[asked]:.0f}, each of the crowd {crowd_mean:.0f}")
    assert used[asked] > 2 * crowd_mean, used


async def test_the_memory_guard_turns_host_pressure_into_an_oom_kill_inside_the_node(capped, base_layer):
    """When the host runs short (a reading below the guard's floor: the host is simulated, the
    cgroups are real), the node's limit drops to what it holds: a sandbox that then allocates
    is OOM-killed inside the node, though its own limit and the node's claim would take it, and
    the others keep answering; once the host has room the claim is back and it allocates."""
    from corral_node_agent.capacity.memory_guard import MemoryGuard

    claim = 1024 * MIB
    backend, group = capped(memory_mb=1024, pids=512)
    quiet, hungry = await start(backend, base_layer), await start(backend, base_layer, memory_mb=256)
    allocate = "awk 'BEGIN { s = \"x\"; while (length(s) < 67108864) s = s s; print length(s) }'"  # 64 MiB, twice
    host = {"available": 8 * 1024 * MIB}
    guard = MemoryGuard(group, claim, 512, floor_bytes=512 * MIB, available=lambda: host["available"])
    try:
        assert guard.check().limit_bytes is None and guard.limit == claim
        host["available"] = 256 * MIB  # the host is short
        assert guard.check().why.startswith("lower")
        assert guard.limit < 128 * MIB and guard.limit_mb == guard.limit // MIB  # what the heartbeat advertises
        r = await backend.exec(hungry, ExecRequest(cmd=allocate, timeout_s=30))
        assert r.exit_code == 137 and r.oom_killed, r  # killed inside the node, not the host's problem
        assert (await backend.exec(quiet, ExecRequest(cmd="echo alive", timeout_s=10))).stdout == "alive\n"
        host["available"] = 8 * 1024 * MIB
        assert guard.check().why.startswith("restore") and guard.limit == claim
        r = await backend.exec(hungry, ExecRequest(cmd=allocate, timeout_s=30))
        assert r.exit_code == 0 and r.stdout.strip() == "67108864", r
    finally:
        guard.stop()
        for sid in (quiet, hungry):
            await backend.stop(sid)
