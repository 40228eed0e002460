from corral_common.sandboxes import SandboxSpec
from corral_common.state import NodeInfo
from corral_scheduler.placement.policy import could_ever_fit, fits, rank_nodes


def node(node_id, cpu=4000, mem=4096, maxsb=100, used_cpu=0, used_mem=0, used_sb=0):
    return NodeInfo(node_id=node_id, url=f"http://{node_id}", cpu_milli=cpu, memory_mb=mem, max_sandboxes=maxsb,
                    heartbeat_at=0.0, used_cpu_milli=used_cpu, used_memory_mb=used_mem, used_sandboxes=used_sb)


SPEC = SandboxSpec(environment="e", cpu=1, memory_mb=1024)


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
