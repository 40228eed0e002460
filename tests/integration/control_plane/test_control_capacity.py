"""Honest capacity across the control plane: the host-wide claim registry (real flock, real
processes), pids counted by the scheduler's reservations (real Redis and RabbitMQ), and the
api refusing a pids_limit no node allows (the real api app)."""

import json
import os
import subprocess
import sys
import uuid

import httpx
import pytest

from corral_common.contracts.sandboxes import SandboxSpec
from corral_common.store.state import StateStore
from corral_host.cgroups.detect import cgroup_driver
from corral_host.cgroups.node import node_cgroup_path
from corral_node_agent import capacity
from corral_node_agent.capacity.registry import HostRegistry
from corral_node_agent.capacity.resources import Host, Resources, host_budget, total
from corral_node_agent.settings import NodeAgentSettings

HOST = Host(cpus=2.0, memory_mb=24105, tasks=32768)  # the machine of findings 3 and 4
BUDGET = host_budget(HOST, None, 4096)


def agent(tmp_path, name: str, **kw) -> NodeAgentSettings:
    return NodeAgentSettings(node_id=f"{name}-{uuid.uuid4().hex[:6]}", state_dir=str(tmp_path / name),
                             capacity_registry_dir=str(tmp_path / "registry"), **kw)


# ---- the host registry -----------------------------------------------------------------------


def test_two_default_agents_on_one_host_never_sum_past_it(tmp_path):
    """Finding 4: each agent used to advertise 0.9 x RAM. Now the second one gets what the
    first left (nothing, with both at the default share) and says so."""
    first_cap, first = capacity.claim(agent(tmp_path, "n1"), host=HOST)
    second_cap, second = capacity.claim(agent(tmp_path, "n2"), host=HOST)
    try:
        assert first.resources == BUDGET and first.clamped == []
        assert second.resources == Resources(0.0, 0, 0) and second.clamped == ["cpu", "memory_mb", "pids"]
        assert (second_cap.cpu, second_cap.memory_mb, second_cap.pids) == (0.0, 0, 0)
        assert first_cap.memory_mb + second_cap.memory_mb <= HOST.memory_mb
        # Two 20,000 MB sandboxes no longer fit the two nodes of a 24 GB host.
        assert sum(cap.memory_mb // 20000 for cap in (first_cap, second_cap)) == 1
    finally:
        first.release()
        second.release()


def test_halves_split_the_host_and_a_released_claim_is_given_again(tmp_path):
    a_cap, a = capacity.claim(agent(tmp_path, "a", host_share=0.5), host=HOST)
    _, b = capacity.claim(agent(tmp_path, "b", host_share=0.5), host=HOST)
    assert a.clamped == b.clamped == [] and total([a.resources, b.resources]).fits_in(BUDGET)
    assert (a_cap.cpu, a.resources.memory_mb, a.resources.pids) == (8.0, 10847, 14336)  # 1 core x 8
    _, late = capacity.claim(agent(tmp_path, "late", host_share=0.5), host=HOST)
    assert late.resources == BUDGET - a.resources - b.resources  # the odd MiB halving left
    assert late.resources.memory_mb == 1 and late.clamped == ["cpu", "memory_mb", "pids"]
    late.release()
    b.release()  # its agent exited: nobody holds its file and nothing runs in its cgroup
    _, again = capacity.claim(agent(tmp_path, "again", host_share=0.5), host=HOST)
    assert again.clamped == [] and again.resources == b.resources
    a.release()
    again.release()


CLAIMER = """
import json, sys
from corral_node_agent import capacity
from corral_node_agent.capacity.resources import Host
from corral_node_agent.settings import NodeAgentSettings
settings = NodeAgentSettings(node_id=sys.argv[1], state_dir=sys.argv[2], capacity_registry_dir=sys.argv[3],
                             host_share=float(sys.argv[4]), memory_capacity_mb=int(sys.argv[5]) or None)
cap, claim = capacity.claim(settings, host=Host(cpus=2.0, memory_mb=24105, tasks=32768))
print("CLAIM", json.dumps(claim.resources.as_dict()), flush=True)  # after its log lines
sys.stdin.read()  # hold the claim until the test closes our stdin
"""


def claimed(proc: subprocess.Popen) -> str:
    for line in proc.stdout:
        if line.startswith("CLAIM "):
            return line.removeprefix("CLAIM ")
    raise AssertionError(f"claimer exited with {proc.wait()} before claiming")


def test_concurrent_agents_in_separate_processes_stay_within_the_host(tmp_path):
    """Six agents start at once, whatever their settings say (shares summing to 2.4, one
    asking for all the RAM): the claims they hold never add up past the machine."""
    settings = [(0.4, 0)] * 5 + [(0.4, 50_000)]
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, f"c{i}-{uuid.uuid4().hex[:4]}", str(tmp_path / f"c{i}"),
                               str(tmp_path / "registry"), str(share), str(memory)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ)
             for i, (share, memory) in enumerate(settings)]
    try:
        claims = [Resources.from_dict(json.loads(claimed(p))) for p in procs]
        assert total(claims).fits_in(BUDGET)
        assert total(claims).memory_mb > BUDGET.memory_mb * 0.99  # and the host is used, not left idle
        assert sorted(p.key for p in HostRegistry(str(tmp_path / "registry")).peers()) == sorted(
            f.name[:-5] for f in (tmp_path / "registry").glob("*.json"))
        assert len(HostRegistry(str(tmp_path / "registry")).peers()) == len(procs)  # all live
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=30)
    assert HostRegistry(str(tmp_path / "registry")).peers() == []  # every claimer exited: all stale


def test_an_exited_agent_whose_sandboxes_still_run_keeps_its_share(tmp_path):
    """Sandboxes outlive their agent (to be re-adopted): while anything runs in its node's
    cgroup, its claim still counts, so a newcomer cannot take the share they use."""
    driver = cgroup_driver()
    if os.geteuid() != 0 or not driver.available():
        pytest.skip("needs root and cgroup v1 memory, pids and cpuacct")
    gone = agent(tmp_path, "gone", host_share=0.5)
    _, claim = capacity.claim(gone, host=HOST)
    group = driver.cgroup(f"{node_cgroup_path(gone.node_id)}/sb-left").create()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        for f in group.procs_files():
            with open(f, "w") as fh:
                fh.write(str(sleeper.pid))
        claim.release()  # the agent is gone, its sandbox is not
        _, newcomer = capacity.claim(agent(tmp_path, "new"), host=HOST)
        assert newcomer.resources.memory_mb == BUDGET.memory_mb - claim.resources.memory_mb
        assert newcomer.clamped == ["cpu", "memory_mb", "pids"]
        newcomer.release()
    finally:
        sleeper.kill()
        sleeper.wait()
        driver.cgroup(node_cgroup_path(gone.node_id)).remove()
    _, after = capacity.claim(agent(tmp_path, "after"), host=HOST)  # its sandbox ended: the share is free
    assert after.resources == BUDGET
    after.release()


def test_two_live_agents_on_one_state_dir_are_refused(tmp_path):
    settings = agent(tmp_path, "dup")
    _, held = capacity.claim(settings, host=HOST)
    try:
        with pytest.raises(RuntimeError, match="two node-agents on one state dir"):
            capacity.claim(settings, host=HOST)
    finally:
        held.release()
    _, restarted = capacity.claim(settings, host=HOST)  # a restart takes its own claim over
    assert restarted.resources == BUDGET
    restarted.release()


def test_a_node_id_another_running_agent_holds_is_refused(tmp_path):
    """Two platforms on one host, each naming its first node node-1: they would share the
    node's cgroup (its caps, its sandbox count, the memory-manager's view)."""
    first = agent(tmp_path, "mine")
    other = NodeAgentSettings(node_id=first.node_id, state_dir=str(tmp_path / "other-platform"),
                              capacity_registry_dir=first.capacity_registry_dir)
    _, held = capacity.claim(first, host=HOST)
    try:
        with pytest.raises(RuntimeError, match=f"node id '{first.node_id}' is taken on this host") as info:
            capacity.claim(other, host=HOST)
        assert first.state_dir in str(info.value) and "CORRAL_NODE_ID" in str(info.value)
    finally:
        held.release()
    _, later = capacity.claim(other, host=HOST)  # once that agent is gone
    later.release()


# ---- reservations count pids ------------------------------------------------------------------


async def test_a_node_left_nothing_advertises_nothing_and_takes_nothing(redis_url, tmp_path):
    _, first = capacity.claim(agent(tmp_path, "n1"), host=HOST)
    empty_cap, empty = capacity.claim(agent(tmp_path, "n2"), host=HOST)
    store = StateStore.from_url(redis_url)
    try:
        await store.heartbeat("empty", "http://e", empty_cap.cpu, empty_cap.memory_mb, 100, pids=empty_cap.pids)
        node = await store.get_node("empty")
        assert (node.cpu_milli, node.memory_mb, node.pids) == (0, 0, 0)
        tiny = SandboxSpec(environment="e", cpu=0.001, memory_mb=16, pids_limit=8)
        assert await store.reserve("empty", "sb-tiny", tiny, 10) is None
    finally:
        await store.close()
        first.release()
        empty.release()


async def test_reservations_made_before_pids_were_counted_still_release(redis_url):
    store = StateStore.from_url(redis_url)
    try:
        await store.heartbeat("old", "http://o", 4, 1000, 10)  # a node that counts no pids
        assert (await store.get_node("old")).pids is None
        await store.redis.hset("node:old:used", mapping={"cpu_milli": 1000, "memory_mb": 256, "sandboxes": 1})
        await store.redis.set("resv:sb-old", "old|1000|256")  # the value format before pids
        assert await store.release("sb-old")
        info = await store.get_node("old")
        assert (info.used_cpu_milli, info.used_memory_mb, info.used_sandboxes, info.used_pids) == (0, 0, 0, 0)
    finally:
        await store.close()


# ---- the api refuses what no node allows -----------------------------------------------------


@pytest.fixture
async def api(redis_url, amqp_url, tmp_path):
    from corral_api.app import create_app
    from corral_api.settings import ApiSettings

    app = create_app(ApiSettings(redis_url=redis_url, amqp_url=amqp_url, database_url=f"sqlite:///{tmp_path}/api.db",
                                 keys="cap:cap-key-123456", image_service_url="http://127.0.0.1:9"))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                     headers={"authorization": "Bearer cap-key-123456"}) as client:
            yield client, app.state.services.store


async def test_api_refuses_a_pids_limit_above_every_node_with_a_422_naming_it(api):
    client, store = api
    await store.heartbeat("small", "http://s", 8, 4000, 100, pids=3000)
    await store.heartbeat("big", "http://b", 8, 4000, 100, pids=12000)
    response = await client.post("/v1/sandboxes", json={"environment": "busybox", "pids_limit": 20000})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "exceeds_node_capacity" and error["max_pids_limit"] == 12000
    assert error["details"][0]["loc"] == ["body", "pids_limit"] and "12000" in error["message"]
    job = await client.post("/v1/jobs", json={"spec": {"environment": "busybox", "pids_limit": 20000}, "count": 3})
    assert job.status_code == 422 and job.json()["error"]["details"][0]["loc"] == ["body", "spec", "pids_limit"]
    # Nothing was made (a request is only queued for the scheduler once its record exists).
    assert (await client.get("/v1/sandboxes")).json()["items"] == []
    assert [k async for k in store.redis.scan_iter("sb:sb-*")] == []
    # Within the ceiling it goes on to the next check (here: image-service is unreachable).
    within = await client.post("/v1/sandboxes", json={"environment": "busybox", "pids_limit": 12000})
    assert within.status_code == 503, within.text
