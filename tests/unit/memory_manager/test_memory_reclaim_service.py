"""The reclaim loop's idle decisions end to end on stand-in cgroups and a stand-in node-agent
activity: a VM whose QEMU keeps ticking is reclaimed once idle; an exec in flight, a busy cpu
rate, or the manager's own housekeeping do what they should; without the node-agent the
container rule applies to every sandbox."""

from corral_common.contracts.memory import SandboxActivity
from corral_memory_manager.reclaim.idleness import IdleRule
from corral_memory_manager.reclaim.policy import ReclaimPolicy
from corral_memory_manager.reclaim.service import ReclaimService
from tests.unit.memory_manager.fakes import Clock, FakeDriver

MIB = 1 << 20


def service(rates: dict[str, float], activity=None, kinds=None):
    clock = Clock()
    driver = FakeDriver(clock, rates)
    kinds = kinds or {}
    idle = {sid: 1e6 for sid in rates}
    flight = {sid: 0 for sid in rates}

    def report():
        if activity == "down":
            raise OSError("node-agent unreachable")
        return [SandboxActivity(sandbox_id=s, kind=kinds.get(s, "container"), calls_in_flight=flight[s],
                                idle_s=idle[s]) for s in rates]
    svc = ReclaimService("n1", ReclaimPolicy(idle_after_s=30, min_bytes=8 * MIB), driver=driver, clock=clock,
                         idle_rule=IdleRule(cpu_cores=0.01, vm_cpu_cores=0.15), activity=report if activity else None)
    return svc, clock, idle, flight


def passes(svc, clock, seconds: float, step: float = 5.0) -> set[str]:
    reclaimed = set()
    end = clock.now + seconds
    while clock.now < end:
        clock.now += step
        reclaimed |= {r.sandbox_id for r in svc.run_once().reclaimed}
    return reclaimed


def test_a_ticking_vm_is_reclaimed_once_idle_and_a_busy_one_is_not():
    svc, clock, _, _ = service({"vm-idle": 0.04, "vm-busy": 0.9, "ctr": 0.0}, activity="up",
                               kinds={"vm-idle": "vm", "vm-busy": "vm"})
    assert passes(svc, clock, 25) == set()  # not yet idle_after_s
    assert passes(svc, clock, 15) == {"vm-idle", "ctr"}
    assert svc.is_vm("vm-idle") and not svc.is_vm("ctr")


def test_an_exec_in_flight_or_just_ended_keeps_a_sandbox_out():
    svc, clock, idle, flight = service({"vm": 0.0}, activity="up", kinds={"vm": "vm"})
    flight["vm"] = 1
    assert passes(svc, clock, 60) == set()
    flight["vm"], idle["vm"] = 0, 0.0
    assert passes(svc, clock, 5) == set()  # just ended
    idle["vm"] = 1e6
    assert passes(svc, clock, 40) == {"vm"}


def test_without_the_node_agent_every_sandbox_gets_the_container_rule():
    """A ticking VM is then never idle (as before the fix): no harm, only no reclaim."""
    svc, clock, _, _ = service({"vm": 0.04, "ctr": 0.0}, activity="down")
    assert passes(svc, clock, 60) == {"ctr"}


def test_the_managers_own_housekeeping_does_not_wake_a_sandbox():
    svc, clock, _, _ = service({"vm": 0.04}, activity="up", kinds={"vm": "vm"})
    passes(svc, clock, 25)
    cg = svc.driver.cgroups["vm"]
    with svc.housekeeping("vm"):
        cg.rate = 0.8  # the in-guest cache drop burns cpu in the guest
        passes(svc, clock, 5)
        cg.rate = 0.04
    assert svc.idle_seconds("vm") == clock.now - 5  # idle since the first pass saw it


def test_a_sandbox_claimed_from_the_warm_pool_is_seen_under_its_id_through_its_cgroups_name():
    """Its cgroup keeps the name it was started ahead with (node-agent sandboxes/warm_pool.py);
    the node's activity says whose it is, and the reclaim reads and pages out that cgroup."""
    clock = Clock()
    driver = FakeDriver(clock, {"wp-0123": 0.0, "wp-4567": 0.0})
    paged = []
    driver.cgroups["wp-0123"].reclaim = lambda nbytes: paged.append("wp-0123") or True

    def report():
        return [SandboxActivity(sandbox_id="sb-claimed", kind="container", idle_s=1e6, cgroup="wp-0123")]
    svc = ReclaimService("n1", ReclaimPolicy(idle_after_s=30, min_bytes=8 * MIB), driver=driver, clock=clock,
                         idle_rule=IdleRule(cpu_cores=0.01), activity=report)
    # The unclaimed one is idle too (a node may page it out); the claimed one goes by its id.
    assert passes(svc, clock, 40) == {"sb-claimed", "wp-4567"}
    assert paged == ["wp-0123"]
