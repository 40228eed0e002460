"""StateStore against a real Redis: compare-and-set transitions and atomic capacity."""

import asyncio

import pytest

from corral_common.contracts.sandboxes import SandboxState
from corral_common.store.state import StateStore
from corral_common.store.state_records import SandboxRecord
from corral_common.store.state_reservations import RestoreOutcome
from tests.specs import guaranteed


@pytest.fixture
async def store(redis_url):
    s = StateStore.from_url(redis_url)
    yield s
    await s.close()


async def test_transition_follows_the_state_machine(store):
    await store.create_sandbox("sb-1", "t1", guaranteed(environment="e"))
    assert (await store.transition("sb-1", SandboxState.running)) == (False, SandboxState.pending)
    assert (await store.transition("sb-1", SandboxState.scheduled, node_id="n1")) == (True, SandboxState.pending)
    record = await store.get_sandbox("sb-1")
    assert record.state is SandboxState.scheduled and record.node_id == "n1"
    assert (await store.transition("sb-1", SandboxState.failed, reason="node_lost"))[0]
    # Terminal is final, and the record now expires.
    assert not (await store.transition("sb-1", SandboxState.running))[0]
    assert 0 < await store.redis.ttl("sb:sb-1") <= 3600


async def test_concurrent_transitions_have_one_winner(store):
    await store.create_sandbox("sb-2", "t1", guaranteed(environment="e"))
    results = await asyncio.gather(*(store.transition("sb-2", SandboxState.terminated, reason=f"r{i}") for i in range(20)))
    assert sum(changed for changed, _ in results) == 1


async def test_reserve_never_overcommits(store):
    await store.heartbeat("n1", "http://n1", cpu_capacity=100, memory_mb=1000, max_sandboxes=100)
    spec = guaranteed(environment="e", memory_mb=100, cpu=0.1)
    got = await asyncio.gather(*(store.reserve("n1", f"sb-{i}", spec, 10) for i in range(25)))
    assert sum(1 for g in got if g) == 10  # 1000 MB / 100 MB
    node = await store.get_node("n1")
    assert node.used_memory_mb == 1000 and node.used_sandboxes == 10


async def test_reserve_is_idempotent_and_release_frees(store):
    await store.heartbeat("n1", "http://n1", cpu_capacity=1, memory_mb=1000, max_sandboxes=10)
    spec = guaranteed(environment="e", memory_mb=600, cpu=0.5)
    assert await store.reserve("n1", "sb-a", spec, 10) == "n1"
    assert await store.reserve("n1", "sb-a", spec, 10) == "n1"  # re-delivered request: same reservation
    assert (await store.get_node("n1")).used_memory_mb == 600
    assert await store.reserve("n1", "sb-b", spec, 10) is None
    assert await store.release("sb-a")
    assert not await store.release("sb-a")
    assert (await store.get_node("n1")).used_memory_mb == 0
    assert await store.reserve("n1", "sb-b", spec, 10) == "n1"


async def test_stale_node_takes_nothing(store):
    await store.heartbeat("n1", "http://n1", cpu_capacity=1, memory_mb=1000, max_sandboxes=10)
    await store.redis.hset("node:n1", "heartbeat_at", "0")
    await store.redis.zadd("nodes", {"n1": 0})
    assert await store.reserve("n1", "sb-x", guaranteed(environment="e"), 10) is None
    assert await store.lost_nodes(10) == ["n1"]
    assert await store.live_nodes(10) == []


async def test_list_and_tenant_index(store):
    await store.create_sandbox("sb-1", "t1", guaranteed(environment="e", labels={"job": "a"}))
    await store.create_sandbox("sb-2", "t2", guaranteed(environment="e"))
    assert [r.id for r in await store.list_sandboxes("t1")] == ["sb-1"]
    await store.redis.delete("sb:sb-1")  # expired
    assert await store.list_sandboxes("t1") == []
    assert await store.redis.smembers("sb:tenant:t1") == set()


async def test_runtime_and_required_node_round_trip(store):
    spec = guaranteed(environment="e", backend="microvm", from_snapshot="snap-1")
    await store.create_sandbox("sb-vm", "t1", spec, required_node="n7")
    await store.transition("sb-vm", SandboxState.scheduled, node_id="n7")
    await store.transition("sb-vm", SandboxState.starting)
    runtime = {"backend": "microvm", "accelerator": "tcg", "image_transport": "virtio-blk"}
    assert (await store.transition("sb-vm", SandboxState.running, runtime=runtime))[0]
    record = await store.get_sandbox("sb-vm")
    assert record.runtime == runtime and record.required_node == "n7" and record.spec.backend == "microvm"
    assert (await store.get_sandbox("sb-2-missing")) is None


async def test_vm_reservation_takes_the_overhead_and_gives_it_back(store):
    await store.heartbeat("nv", "http://nv", cpu_capacity=8, memory_mb=1000, max_sandboxes=10,
                          backends=["container", "microvm", "vm"], accelerator="tcg", vm_memory_overhead_mb=150)
    node = await store.get_node("nv")
    assert node.backends == ("container", "microvm", "vm") and node.vm_memory_overhead_mb == 150
    spec = guaranteed(environment="e", backend="microvm", memory_mb=300)
    assert await store.reserve("nv", "sb-v1", spec, 10, memory_mb=node.reserved_memory_mb(spec)) == "nv"
    assert (await store.get_node("nv")).used_memory_mb == 450
    assert await store.release("sb-v1")
    assert (await store.get_node("nv")).used_memory_mb == 0


async def test_a_heartbeat_carries_the_warm_pools_ready_counts_and_a_later_one_without_clears_them(store):
    await store.heartbeat("nw", "http://nw", cpu_capacity=4, memory_mb=1000, max_sandboxes=10, warm={"abc123": 3})
    assert (await store.get_node("nw")).warm == {"abc123": 3}
    view = await store.placement_view("sb-none", 60)
    assert [n.warm for n in view.nodes if n.node_id == "nw"] == [{"abc123": 3}]
    await store.heartbeat("nw", "http://nw", cpu_capacity=4, memory_mb=1000, max_sandboxes=10, warm={})
    assert (await store.get_node("nw")).warm == {}


async def test_reserve_counts_disk_against_what_the_node_advertises(store):
    await store.heartbeat("nd", "http://nd", cpu_capacity=100, memory_mb=100_000, max_sandboxes=100, disk_mb=10_000)
    spec = guaranteed(environment="e", memory_mb=16, cpu=0.1, disk_mb=3_000)
    got = await asyncio.gather(*(store.reserve("nd", f"sb-d{i}", spec, 10) for i in range(6)))
    assert sum(1 for g in got if g) == 3  # 10 000 MiB of disk / 3 000, with memory and cpu to spare
    node = await store.get_node("nd")
    assert (node.disk_mb, node.used_disk_mb, node.free_disk_mb) == (10_000, 9_000, 1_000)
    taken = [f"sb-d{i}" for i, g in enumerate(got) if g]
    assert await store.release(taken[0])
    assert (await store.get_node("nd")).used_disk_mb == 6_000
    assert await store.reserve("nd", "sb-d-next", spec, 10) == "nd"


async def test_a_node_that_advertises_no_disk_is_not_limited_by_it(store):
    await store.heartbeat("nold", "http://nold", cpu_capacity=1, memory_mb=1000, max_sandboxes=10)
    assert (await store.get_node("nold")).disk_mb is None
    assert await store.reserve("nold", "sb-old", guaranteed(environment="e", disk_mb=1_000_000), 10) == "nold"
    # A reservation made before disks were counted ("node|cpu|mem") is still released.
    await store.redis.set("resv:sb-older", "nold|100|64")
    for field, value in (("cpu_milli", 100), ("memory_mb", 64), ("sandboxes", 1)):
        await store.redis.hincrby("node:nold:used", field, value)
    assert await store.release("sb-older") and await store.release("sb-old")
    used = await store.redis.hgetall("node:nold:used")
    assert {k: int(v) for k, v in used.items()} == {"cpu_milli": 0, "memory_mb": 0, "sandboxes": 0, "pids": 0, "disk_mb": 0}


# ---- a node registers what it runs again (restore_sandbox) ----------------------------------


def _running(sandbox_id: str, node: str, **fields) -> SandboxRecord:
    spec = guaranteed(environment="e", memory_mb=128, cpu=0.5, pids_limit=64, disk_mb=100, labels={"k": "v"})
    return SandboxRecord(id=sandbox_id, tenant="t1", state=SandboxState.running, spec=spec, created_at=100.0,
                         updated_at=200.0, node_id=node, started_at=150.0, runtime={"backend": "container"}, **fields)


async def test_restore_writes_what_a_wiped_redis_lost_like_a_placement_had(store):
    """The same record, reservation and sets as reserve + transitions made (value format
    node|cpu|mem|pids|disk), so release and list work on it as on any other."""
    await store.heartbeat("n1", "http://n1", cpu_capacity=4, memory_mb=1000, max_sandboxes=10)
    record = _running("sb-r", "n1", job_id="job-1")
    assert await store.restore_sandbox(record) is RestoreOutcome.restored
    assert await store.restore_sandbox(record) is RestoreOutcome.kept  # idempotent: counted once
    got = await store.get_sandbox("sb-r")
    assert (got.tenant, got.state, got.node_id, got.spec, got.created_at, got.started_at, got.job_id) == (
        "t1", SandboxState.running, "n1", record.spec, 100.0, 150.0, "job-1")
    assert await store.redis.get("resv:sb-r") == "n1|500|128|64|100"
    node = await store.get_node("n1")
    assert (node.used_cpu_milli, node.used_memory_mb, node.used_sandboxes, node.used_pids, node.used_disk_mb) == (
        500, 128, 1, 64, 100)
    assert [r.id for r in await store.list_sandboxes("t1")] == ["sb-r"]
    assert await store.node_sandboxes("n1") == {"sb-r"}
    assert await store.redis.smembers("job:job-1:all") == {"sb-r"}
    assert await store.release("sb-r")
    node = await store.get_node("n1")
    assert (node.used_memory_mb, node.used_sandboxes, node.used_pids, node.used_disk_mb) == (0, 0, 0, 0)


async def test_restore_never_overwrites_a_record_that_moved_on(store):
    await store.heartbeat("n1", "http://n1", cpu_capacity=4, memory_mb=1000, max_sandboxes=10)
    await store.create_sandbox("sb-done", "t1", guaranteed(environment="e"))
    await store.transition("sb-done", SandboxState.terminated, reason="deleted")
    assert await store.restore_sandbox(_running("sb-done", "n1")) is RestoreOutcome.ended
    assert (await store.get_sandbox("sb-done")).state is SandboxState.terminated
    assert await store.redis.exists("resv:sb-done") == 0
    # Running on another node per its record: this copy is the one to stop.
    await store.create_sandbox("sb-away", "t1", guaranteed(environment="e"))
    await store.transition("sb-away", SandboxState.scheduled, node_id="n2")
    assert await store.restore_sandbox(_running("sb-away", "n1")) is RestoreOutcome.elsewhere
    assert (await store.get_sandbox("sb-away")).node_id == "n2"


async def test_restore_tells_a_record_not_yet_running_where_it_runs(store):
    """A job re-submitted after a wipe made a pending record of a sandbox a node still runs."""
    await store.heartbeat("n1", "http://n1", cpu_capacity=4, memory_mb=1000, max_sandboxes=10)
    await store.create_sandbox("sb-p", "t1", guaranteed(environment="e", memory_mb=128))
    assert await store.restore_sandbox(_running("sb-p", "n1")) is RestoreOutcome.updated
    got = await store.get_sandbox("sb-p")
    assert (got.state, got.node_id, got.runtime) == (SandboxState.running, "n1", {"backend": "container"})
    assert await store.reservation_node("sb-p") == "n1"


async def test_a_node_the_reaper_gave_up_stops_instead_of_registering(store):
    """Its records failed as node_lost and may have expired: the tombstone says so until the
    node's next heartbeat."""
    await store.heartbeat("n1", "http://n1", cpu_capacity=4, memory_mb=1000, max_sandboxes=10)
    await store.forget_node("n1")
    assert await store.restore_sandbox(_running("sb-gone", "n1")) is RestoreOutcome.lost
    assert await store.get_sandbox("sb-gone") is None and await store.node_sandboxes("n1") == set()
    await store.heartbeat("n1", "http://n1", cpu_capacity=4, memory_mb=1000, max_sandboxes=10)
    assert await store.restore_sandbox(_running("sb-new", "n1")) is RestoreOutcome.restored


async def test_heartbeat_carries_the_nodes_measured_memory(store):
    """What the node-agent's accounting measured shows in GET /v1/nodes (live_nodes), and a
    node that stops sending it (no cgroups) shows None again."""
    measured = {"working_set_mb": 812.5, "peak_working_set_mb": 1024.0, "swap_mb": 96.0, "mib_seconds": 48000.0}
    await store.heartbeat("n1", "http://n1", cpu_capacity=1, memory_mb=1000, max_sandboxes=10, memory=measured)
    (node,) = await store.live_nodes(10)
    assert node.memory == measured
    await store.heartbeat("n1", "http://n1", cpu_capacity=1, memory_mb=1000, max_sandboxes=10)
    assert (await store.get_node("n1")).memory is None


async def test_listing_pages_in_id_order_with_a_filter_and_a_waiting_reason(store):
    import uuid

    tenant = f"pages-{uuid.uuid4().hex[:6]}"
    ids = [f"{tenant}-{i:03d}" for i in range(25)]
    for i, sid in enumerate(ids):
        await store.create_sandbox(sid, tenant, guaranteed(environment="e", labels={"odd": str(i % 2)}))
    odd = lambda r: r.spec.labels["odd"] == "1"  # noqa: E731
    seen, after = [], None
    while True:
        page, after = await store.list_sandboxes_page(tenant, limit=4, after=after, keep=odd)
        assert len(page) <= 4
        seen += [r.id for r in page]
        if after is None:
            break
    assert seen == ids[1::2]  # each once, in order, only the kept ones
    page, after = await store.list_sandboxes_page(tenant, limit=100)
    assert [r.id for r in page] == ids and after is None
    # A waiting reason is written only while pending; the scheduled step clears it.
    assert await store.set_waiting_reason(ids[0], "waiting for room: n1 full (pids)")
    assert (await store.get_sandbox(ids[0])).reason == "waiting for room: n1 full (pids)"
    assert (await store.transition(ids[0], SandboxState.scheduled, node_id="n1", reason=""))[0]
    assert (await store.get_sandbox(ids[0])).reason is None
    assert not await store.set_waiting_reason(ids[0], "late")
    assert (await store.get_sandbox(ids[0])).reason is None


async def test_placement_view_reads_what_the_separate_reads_do(store):
    """The scheduler's one-round-trip view equals get_sandbox + reservation_node + live_nodes,
    and leaves out a node whose heartbeat is stale."""
    spec = guaranteed(environment="e", memory_mb=100, cpu=0.1)
    await store.heartbeat("n1", "http://n1", cpu_capacity=2, memory_mb=1000, max_sandboxes=10)
    await store.heartbeat("n2", "http://n2", cpu_capacity=4, memory_mb=2000, max_sandboxes=20)
    await store.heartbeat("n3", "http://n3", cpu_capacity=4, memory_mb=2000, max_sandboxes=20)
    await store.redis.zadd("nodes", {"n3": 0})  # stale
    await store.create_sandbox("sb-v", "t1", spec)
    view = await store.placement_view("sb-v", 10)
    assert view.record == await store.get_sandbox("sb-v") and view.held is None
    assert view.nodes == await store.live_nodes(10) and {n.node_id for n in view.nodes} == {"n1", "n2"}
    assert await store.reserve("n2", "sb-v", spec, 10) == "n2"
    view = await store.placement_view("sb-v", 10)
    assert view.held == "n2" and next(n for n in view.nodes if n.node_id == "n2").used_memory_mb == 100
    assert await store.placement_view("sb-gone", 10) == (None, None, view.nodes)
