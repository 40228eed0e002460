from corral_common.contracts.sandboxes import Requests, SandboxSpec, pids_max, warm_pool_shape
from corral_common.store.state_nodes import NodeInfo
from corral_scheduler.placement.policy import (
    by_warm_pool,
    could_ever_fit,
    fits,
    never_fits_reason,
    rank_nodes,
    short_of,
    too_small,
    waiting_reason,
)


def node(node_id, cpu=4000, mem=4096, maxsb=100, used_cpu=0, used_mem=0, used_sb=0):
    return NodeInfo(node_id=node_id, url=f"http://{node_id}", cpu_milli=cpu, memory_mb=mem, max_sandboxes=maxsb,
                    heartbeat_at=0.0, used_cpu_milli=used_cpu, used_memory_mb=used_mem, used_sandboxes=used_sb)


def guaranteed(**fields) -> SandboxSpec:
    """A spec whose requests are its limits (Kubernetes' Guaranteed): what it reserves is what it may use."""
    spec = SandboxSpec(environment="e", **fields)
    return SandboxSpec(environment="e", **fields, requests=Requests(
        cpu=spec.cpu, memory_mb=spec.memory_mb, disk_mb=spec.disk_mb, pids=pids_max(spec.backend, spec.pids_limit)))


SPEC = guaranteed(cpu=1, memory_mb=1024)


def test_fits_checks_every_resource():
    assert fits(node("a"), SPEC)
    assert not fits(node("a", used_mem=3500), SPEC)
    assert not fits(node("a", used_cpu=3500), SPEC)
    assert not fits(node("a", maxsb=2, used_sb=2), SPEC)


def test_spread_prefers_emptier_node():
    busy, idle = node("a", used_mem=2048), node("b", used_mem=512)
    assert [n.node_id for n in rank_nodes([busy, idle], SPEC, "spread")] == ["b", "a"]


def test_pack_prefers_fuller_node():
    busy, idle = node("a", used_mem=2048), node("b", used_mem=512)
    assert [n.node_id for n in rank_nodes([busy, idle], SPEC, "pack")] == ["a", "b"]


def test_scarcest_resource_decides_load():
    cpu_bound = node("a", used_cpu=3000)  # 75% cpu, 0% memory
    mem_bound = node("b", used_mem=2048)  # 50% memory
    assert [n.node_id for n in rank_nodes([cpu_bound, mem_bound], SPEC)] == ["b", "a"]


def test_full_nodes_are_excluded():
    assert rank_nodes([node("a", used_mem=4096)], SPEC) == []


def test_could_ever_fit_tells_waiting_from_hopeless():
    full = node("a", used_mem=4096)
    assert could_ever_fit(full, SPEC)
    assert not could_ever_fit(node("small", mem=512), SPEC)


# ---- sandbox kinds ---------------------------------------------------------------------------


def vm_node(node_id, overhead=96, **kw):
    n = node(node_id, **kw)
    n.backends, n.vm_memory_overhead_mb = ("container", "microvm", "vm"), overhead
    return n


def test_only_nodes_advertising_the_backend_are_candidates():
    microvm = SandboxSpec(environment="e", isolation="vm", memory_mb=512)
    assert microvm.backend == "microvm"
    plain, vms = node("a"), vm_node("b", used_mem=3000)
    assert not fits(plain, microvm) and not could_ever_fit(plain, microvm)
    assert [n.node_id for n in rank_nodes([plain, vms], microvm)] == ["b"]  # though "a" is emptier
    assert fits(vms, SPEC)  # a VM-capable node still takes containers


def test_vm_memory_includes_the_nodes_overhead():
    microvm = guaranteed(backend="microvm", memory_mb=1000)
    assert vm_node("a", overhead=100).reserved_memory_mb(microvm) == 1100
    assert vm_node("a").reserved_memory_mb(guaranteed(memory_mb=1000)) == 1000  # container
    assert fits(vm_node("a", overhead=100, used_mem=2996), microvm)  # 4096 - 2996 = 1100
    assert not fits(vm_node("a", overhead=100, used_mem=2997), microvm)
    assert not could_ever_fit(vm_node("a", mem=1099, overhead=100), microvm)
    assert could_ever_fit(vm_node("a", mem=1100, overhead=100), microvm)


# ---- pids (the node's cgroup pids cap) -------------------------------------------------------


def pids_node(node_id, pids, used_pids=0, **kw):
    n = node(node_id, **kw)
    n.pids, n.used_pids = pids, used_pids
    return n


def test_pids_are_a_capacity_like_memory():
    spec = guaranteed(cpu=1, memory_mb=64, pids_limit=512)
    assert fits(pids_node("a", 1024, used_pids=512), spec)
    assert not fits(pids_node("a", 1024, used_pids=513), spec)
    assert could_ever_fit(pids_node("a", 1024, used_pids=1024), spec)  # waits for room
    assert not could_ever_fit(pids_node("a", 511), spec)  # never
    assert not fits(pids_node("a", 0), spec)  # a node whose claim left its sandboxes nothing
    # A node from before the cap counts none: every pids_limit fits it.
    assert node("old").pids is None and fits(node("old"), spec) and could_ever_fit(node("old"), spec)


def test_a_vm_reserves_its_qemus_tasks_not_the_guests_pids_limit():
    from corral_common.contracts.sandboxes import VM_PIDS_LIMIT, VM_REQUESTS

    microvm = SandboxSpec(environment="e", backend="microvm", memory_mb=256, pids_limit=8)
    n = vm_node("a")
    n.pids = VM_REQUESTS["pids"]
    assert n.reserved_pids(microvm) == VM_REQUESTS["pids"] and fits(n, microvm)  # QEMU's, not the guest's 8
    n.pids = VM_REQUESTS["pids"] - 1
    assert not could_ever_fit(n, microvm)
    # Its request may go up to QEMU's cap, whatever the guest's pids_limit.
    assert guaranteed(backend="microvm", memory_mb=256, pids_limit=8).reservation.pids == VM_PIDS_LIMIT


def test_pids_count_in_the_load_spread_ranks_by():
    spec = guaranteed(cpu=1, memory_mb=64, pids_limit=64)
    forky, quiet = pids_node("a", 1000, used_pids=900), pids_node("b", 1000, used_pids=100, used_mem=1024)
    assert [n.node_id for n in rank_nodes([forky, quiet], spec)] == ["b", "a"]


def disk_node(node_id, disk, used_disk=0):
    n = node(node_id)
    n.disk_mb, n.used_disk_mb = disk, used_disk
    return n


def test_disk_is_a_resource_like_the_others():
    spec = guaranteed(cpu=1, memory_mb=256, disk_mb=4096)
    assert fits(disk_node("a", 8192, used_disk=4096), spec)
    assert not fits(disk_node("a", 8192, used_disk=4097), spec)
    assert could_ever_fit(disk_node("a", 8192, used_disk=8192), spec)
    assert not could_ever_fit(disk_node("a", 4095), spec)
    # A node from before disks were scheduled advertises none: disk does not bound it.
    assert fits(node("old"), spec) and could_ever_fit(node("old"), spec)
    # The fuller disk makes the fuller node.
    assert [n.node_id for n in rank_nodes([disk_node("a", 10_000, 5000), disk_node("b", 10_000, 1000)], spec)] == [
        "b", "a"]


LAYERS = {"sha256:" + "a" * 64: 100, "sha256:" + "b" * 64: 900}  # base, workspace


def test_locality_prefers_the_node_holding_most_bytes_then_load():
    from corral_scheduler.placement.policy import by_locality, held_bytes

    idle, some, most = node("idle"), node("some", used_mem=400), node("most", used_mem=800)
    ranked = rank_nodes([most, some, idle], SPEC, "spread")
    assert [n.node_id for n in ranked] == ["idle", "some", "most"]
    held = {"some": {"sha256:" + "a" * 64: 100}, "most": {"sha256:" + "b" * 64: 900, "sha256:" + "a" * 64: 40}}
    assert held_bytes(LAYERS, held["most"]) == 940
    assert [n.node_id for n in by_locality(ranked, LAYERS, held)] == ["most", "some", "idle"]
    # Equal holdings keep the load order; nothing held anywhere changes nothing.
    assert [n.node_id for n in by_locality(ranked, LAYERS, {"some": held["most"], "most": held["most"]})] == [
        "some", "most", "idle"]
    # Two nodes that both hold most of it are equals, whatever chunks each happens to have:
    # spread by load, not always the one with a few more bytes.
    nearly = {"some": {"sha256:" + "b" * 64: 600}, "most": {"sha256:" + "b" * 64: 900}}
    assert [n.node_id for n in by_locality(ranked, LAYERS, nearly)] == ["some", "most", "idle"]
    assert by_locality(ranked, LAYERS, {}) == ranked and by_locality(ranked, {}, held) == ranked
    # A held chunk count never exceeds the layer (a stale report of a bigger blob).
    assert held_bytes(LAYERS, {"sha256:" + "a" * 64: 10**9}) == 100


def test_locality_competes_only_within_the_load_slack():
    from corral_scheduler.placement.policy import by_locality

    idle, full = node("idle"), node("full", used_mem=3000)  # load 0 vs ~0.73
    ranked = rank_nodes([full, idle], SPEC, "spread")
    held = {"full": dict(LAYERS)}
    assert [n.node_id for n in by_locality(ranked, LAYERS, held, slack=0.25)] == ["idle", "full"]
    assert [n.node_id for n in by_locality(ranked, LAYERS, held, slack=1.0)] == ["full", "idle"]


def test_waiting_reason_names_what_each_node_lacks():
    full = node("a", maxsb=2, used_sb=2)
    tight = node("b", used_mem=3500, used_cpu=3500)
    assert short_of(node("c"), SPEC) == []
    assert short_of(full, SPEC) == ["sandbox slots (2/2)"]
    assert short_of(tight, SPEC) == ["cpu", "memory"]
    assert waiting_reason([tight, full], SPEC) == "waiting for room: a full (sandbox slots (2/2)); b full (cpu, memory)"
    assert waiting_reason([], SPEC) == "waiting for room: no live node"
    # Live by its liveness pulse alone: its agent is busy, not full.
    assert waiting_reason([node("c"), full], SPEC, busy={"c"}) == (
        "waiting for room: a full (sandbox slots (2/2)); c busy (heartbeat late)")


def test_never_fits_reason_names_what_each_node_lacks_even_when_empty():
    big = guaranteed(cpu=8, memory_mb=8192)
    assert too_small(node("a"), SPEC) == [] and could_ever_fit(node("a"), SPEC)
    assert too_small(node("a", used_mem=4096), SPEC) == []  # full now is not too small
    assert too_small(node("a"), big) == ["cpu (4 < 8)", "memory (4096 MB < 8192 MB)"]
    assert too_small(node("b", cpu=16000), SandboxSpec(environment="e", backend="vm")) == [
        "backend vm (runs container)"]
    assert never_fits_reason([node("b"), node("a", cpu=16000)], big) == (
        "no live node can ever hold it: a (memory (4096 MB < 8192 MB)), b (cpu (4 < 8); memory (4096 MB < 8192 MB))")


def test_admission_on_measured_use_within_the_overcommit_ratio_and_a_safety_reserve():
    """Node claims 4096 MiB physically and advertises 2x (8192) to reservations. Reservations of
    6144 MiB leave room by the ratio; whether it takes 1024 more depends on what is really used."""
    from dataclasses import replace

    overcommitted = node("a", mem=8192, used_mem=6144)
    light = replace(overcommitted, memory={"working_set_mb": 1500.0, "limit_mb": 4096.0})
    heavy = replace(overcommitted, memory={"working_set_mb": 2800.0, "limit_mb": 4096.0})
    assert [n.node_id for n in rank_nodes([light], SPEC, measured_reserve_mb=512)] == ["a"]  # 1500+1024+512 <= 4096
    assert rank_nodes([heavy], SPEC, measured_reserve_mb=512) == []  # 2800+1024+512 > 4096: the reserve holds
    assert rank_nodes([heavy], SPEC) != []  # off by default: reservations alone decide
    # The ratio still caps: measured use is low but reservations are full.
    full = replace(light, used_memory_mb=7680)
    assert rank_nodes([full], SPEC, measured_reserve_mb=512) == []
    # A node that reports no measurement (or no limit) is judged by reservations alone.
    assert rank_nodes([replace(overcommitted, memory={"working_set_mb": 4000.0})], SPEC, measured_reserve_mb=512)


def test_a_node_with_a_ready_container_of_the_shape_goes_first_within_the_slack():
    spec = SandboxSpec(environment="e", backend="container", memory_mb=512)
    shape = warm_pool_shape(spec, "acme")
    idle, warm, busy_warm = node("idle"), node("warm", used_mem=1024), node("busy", used_mem=3072)
    warm.warm = busy_warm.warm = {shape: 3}
    ranked = rank_nodes([busy_warm, warm, idle], spec)
    assert [n.node_id for n in ranked] == ["idle", "warm", "busy"]
    # warm is 0.25 fuller than idle (within the slack), busy 0.75 (beyond it)
    assert [n.node_id for n in by_warm_pool(ranked, shape, 0.25)] == ["warm", "idle", "busy"]
    assert [n.node_id for n in by_warm_pool(ranked, shape, 1.0)] == ["warm", "busy", "idle"]
    # Another tenant's, another size's, or an unpoolable spec's shape: load order.
    for other in (warm_pool_shape(spec, "globex"), warm_pool_shape(spec.model_copy(update={"memory_mb": 256}), "acme"),
                  warm_pool_shape(spec.model_copy(update={"backend": "microvm"}), "acme")):
        assert [n.node_id for n in by_warm_pool(ranked, other, 1.0)] == ["idle", "warm", "busy"]


def test_a_warm_pool_shape_ignores_what_a_claim_sets():
    spec = SandboxSpec(environment="e", backend="container")
    assert warm_pool_shape(spec, "t") == warm_pool_shape(
        spec.model_copy(update={"timeout_s": 5, "labels": {"a": "b"}, "workdir": "/tmp"}), "t")
    assert warm_pool_shape(spec, "t") != warm_pool_shape(spec.model_copy(update={"env": {"A": "1"}}), "t")
    assert warm_pool_shape(spec.model_copy(update={"network": {"allow": ["pypi.org"]}}), "t") is None
    assert warm_pool_shape(spec.model_copy(update={"environment": ""}), "t") is None


def test_a_warm_pool_shape_names_the_pinned_layers():
    """The node keys its pool by the layers a shape runs on, the scheduler by the record's pin:
    the same digests give the same key, a re-pointed environment (other digests) another one."""
    spec = SandboxSpec(environment="e", backend="container")
    v1, v2 = ["sha256:" + "1" * 64, "sha256:" + "b" * 64], ["sha256:" + "1" * 64, "sha256:" + "c" * 64]
    assert warm_pool_shape(spec, "t", v1) == warm_pool_shape(spec, "t", tuple(v1))
    assert len({warm_pool_shape(spec, "t", v1), warm_pool_shape(spec, "t", v2), warm_pool_shape(spec, "t")}) == 3
    assert warm_pool_shape(spec, "t", v1) != warm_pool_shape(spec, "t", list(reversed(v1)))  # mount order counts
    assert warm_pool_shape(spec.model_copy(update={"environment": ""}), "t", v1) is None
