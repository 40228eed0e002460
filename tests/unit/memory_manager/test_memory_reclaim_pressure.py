"""Pressure-driven reclaim: MemAvailable under its target or PSI memory stalls over theirs make
sandboxes idle for the shorter pressure time due, before the OOM killer has to act; active ones
never; both signals 0 is off; the host readings parse /proc as the kernel writes it."""

from corral_memory_manager.reclaim.policy import ReclaimPolicy, SandboxMemoryView, order
from corral_memory_manager.reclaim.pressure import (
    HostPressure,
    PressureRule,
    effective_policy,
    parse_psi_some_avg10,
    read_host_pressure,
    under_pressure,
)
from corral_memory_manager.reclaim.service import ReclaimService

MIB = 1 << 20
RULE = PressureRule(available_mb=512, psi_some_avg10=10.0, idle_after_s=10)
POLICY = ReclaimPolicy(idle_after_s=60, min_bytes=8 * MIB)


def test_either_signal_is_pressure_and_zero_turns_it_off():
    assert under_pressure(HostPressure(available_mb=300, psi_some_avg10=0.0), RULE)
    assert under_pressure(HostPressure(available_mb=4000, psi_some_avg10=25.0), RULE)
    assert not under_pressure(HostPressure(available_mb=4000, psi_some_avg10=2.0), RULE)
    assert not under_pressure(HostPressure(available_mb=None, psi_some_avg10=None), RULE)  # nothing known
    off = PressureRule()
    assert not off.enabled and not under_pressure(HostPressure(1, 99.0), off)


def test_under_pressure_sandboxes_idle_for_less_are_due_but_never_active_ones():
    views = [SandboxMemoryView("idle-20s", 100 * MIB, False, idle_s=20),
             SandboxMemoryView("busy", 500 * MIB, False, idle_s=1),
             SandboxMemoryView("idle-90s", 100 * MIB, False, idle_s=90)]
    assert [v.sandbox_id for v in order(views, effective_policy(POLICY, False, RULE))] == ["idle-90s"]
    pressed = effective_policy(POLICY, True, RULE)
    assert [v.sandbox_id for v in order(views, pressed)] == ["idle-90s", "idle-20s"]
    # A pressure time longer than the normal one never delays anything.
    assert effective_policy(POLICY, True, PressureRule(available_mb=1, idle_after_s=600)) is POLICY


def test_host_readings_parse_meminfo_and_psi(tmp_path):
    (tmp_path / "pressure").mkdir()
    (tmp_path / "meminfo").write_text("MemTotal:       8000000 kB\nMemFree:  100 kB\nMemAvailable:    524288 kB\n")
    (tmp_path / "pressure/memory").write_text("some avg10=12.50 avg60=3.00 avg300=1.00 total=12345\n"
                                              "full avg10=4.00 avg60=1.00 avg300=0.20 total=999\n")
    reading = read_host_pressure(str(tmp_path))
    assert reading == HostPressure(available_mb=512.0, psi_some_avg10=12.5)
    assert parse_psi_some_avg10("full avg10=1.00 avg60=0 avg300=0 total=0\n") is None
    (tmp_path / "pressure/memory").unlink()  # a kernel without CONFIG_PSI
    assert read_host_pressure(str(tmp_path)).psi_some_avg10 is None


def test_the_loop_reports_pressure_and_reclaims_the_recently_idle():
    from tests.unit.memory_manager.test_memory_reclaim_service import Clock, FakeDriver

    clock = Clock()
    reading = {"now": HostPressure(available_mb=4000, psi_some_avg10=0.0)}
    svc = ReclaimService("n1", POLICY, driver=FakeDriver(clock, {"ctr": 0.0}), clock=clock,
                         pressure_rule=RULE, host_pressure=lambda: reading["now"])
    for _ in range(4):  # 20 s idle: not due without pressure
        clock.now += 5
        report = svc.run_once()
        assert not report.reclaimed and not report.pressure
    reading["now"] = HostPressure(available_mb=200, psi_some_avg10=0.0)
    clock.now += 5
    report = svc.run_once()
    assert report.pressure and [(r.sandbox_id, r.reason) for r in report.reclaimed] == [("ctr", "pressure")]
