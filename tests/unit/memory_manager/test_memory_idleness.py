"""When a sandbox is idle: cpu rate under a per-kind threshold (a running VM's QEMU always ticks),
and no data-path call in flight or recently ended (the node-agent's activity)."""

from corral_common.contracts.memory import SandboxActivity
from corral_memory_manager.reclaim.idleness import IdleRule, IdleWatch, cpu_rate, observe

RULE = IdleRule(cpu_cores=0.01, vm_cpu_cores=0.15, min_window_s=1.0)


def run(kind, rate_cores, seconds=60, step=5.0, activity=None):
    """A watch fed a constant cpu rate every ``step`` s; its idle seconds at the end."""
    watch, cpu, now = IdleWatch.first(0.0, 0.0), 0.0, 0.0
    while now < seconds:
        now += step
        cpu += rate_cores * step * 1000
        observe(watch, cpu, now, RULE, kind, activity(now) if activity else None)
    return watch.idle_s(now)


def test_cpu_rate_is_cores_over_the_window():
    assert cpu_rate(1000.0, 1500.0, 5.0) == 0.1
    assert cpu_rate(1000.0, 900.0, 5.0) == 0.0 and cpu_rate(0.0, 10.0, 0.0) == 0.0


def test_a_vm_whose_qemu_ticks_is_idle_and_a_busy_one_is_not():
    """TCG: a guest with nothing running still costs its QEMU a few % of a core. Under the old
    rule (any cpu movement is use) it was never idle."""
    assert run("vm", 0.04) == 60 and run("microvm", 0.04) == 60
    assert run("vm", 0.5) == 0
    assert run("vm", 0.04, activity=None) > 0 and IdleRule(vm_cpu_cores=0.0).threshold("vm") == 0.0


def test_a_container_is_judged_by_its_own_lower_threshold():
    assert run("container", 0.0) == 60
    assert run("container", 0.05) == 0  # what a VM may burn idle is use in a container
    assert run(None, 0.05) == 0  # kind unknown (no node-agent): the stricter, container rule


def test_an_exec_in_flight_or_just_ended_is_use_whatever_the_cpu():
    in_flight = run("vm", 0.0, activity=lambda now: SandboxActivity(sandbox_id="s", kind="vm", calls_in_flight=1,
                                                                    idle_s=0))
    assert in_flight == 0
    ended = run("vm", 0.0, activity=lambda now: SandboxActivity(sandbox_id="s", kind="vm", idle_s=3.0))
    assert ended == 3.0
    long_ago = run("vm", 0.0, activity=lambda now: SandboxActivity(sandbox_id="s", kind="vm", idle_s=1e6))
    assert long_ago == 60  # never longer than this watch has seen


def test_a_short_window_is_not_judged_its_cpu_counts_in_the_next():
    watch = IdleWatch.first(0.0, 0.0)
    observe(watch, 0.0, 10.0, RULE, "vm", None)  # idle 10 s
    observe(watch, 5.0, 10.01, RULE, "vm", None)  # 5 ms in 10 ms would read 0.5 core
    assert watch.idle_s(10.01) > 10 and watch.sampled_at == 10.0
    observe(watch, 5.0, 12.0, RULE, "vm", None)  # 5 ms over 2 s: 0.0025 core
    assert watch.idle_s(12.0) == 12.0


def test_cpu_the_manager_caused_is_excused_for_its_window():
    watch = IdleWatch.first(0.0, 0.0)
    observe(watch, 0.0, 30.0, RULE, "vm", None)
    watch.excused = True  # an in-guest cache drop ran meanwhile
    observe(watch, 2000.0, 35.0, RULE, "vm", None)  # 0.4 core
    assert watch.idle_s(35.0) == 35.0 and not watch.excused
    observe(watch, 4000.0, 40.0, RULE, "vm", None)  # the same again, not excused: busy
    assert watch.idle_s(40.0) == 0.0


def test_a_new_watch_starts_busy():
    """A restarted manager must see a sandbox idle for idle_after_s itself before acting."""
    assert IdleWatch.first(123.0, 50.0).idle_s(50.0) == 0.0
