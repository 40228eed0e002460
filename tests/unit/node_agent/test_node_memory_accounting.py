"""The node's memory accounting as pure logic: the trapezoid integral, the peak, accounts
opening at the first reading and closing with the sandbox (fake cgroups hand out readings;
the real cgroup files are read in tests/integration/node_agent/test_node_memory_accounting.py)."""

import pytest

from corral_common.contracts.sandboxes import Usage
from corral_host.cgroups.base import MemoryReading
from corral_node_agent.memory.accounting import MIB, MemoryAccount, MemoryAccounting


def reading(ws_mib: float, swap_mib: float = 0) -> MemoryReading:
    return MemoryReading(usage_bytes=int(ws_mib * MIB), working_set_bytes=int(ws_mib * MIB),
                         swap_bytes=int(swap_mib * MIB))


def test_memory_time_is_the_trapezoid_of_the_working_set():
    account = MemoryAccount()
    account.add(reading(100), now=10.0)
    assert account.mib_seconds == 0  # one point is no interval
    account.add(reading(200), now=12.0)  # (100 + 200) / 2 * 2 s
    account.add(reading(200), now=13.0)
    assert account.mib_seconds == pytest.approx(300 + 200)
    account.add(reading(50), now=13.0)  # same instant: no time, new value and peak kept
    assert account.mib_seconds == pytest.approx(500)
    assert account.peak_working_set_bytes == 200 * MIB and account.working_set_bytes == 50 * MIB


def test_an_account_fills_usage_without_touching_the_rest():
    account = MemoryAccount()
    account.add(reading(64, swap_mib=8), 0.0)
    account.add(reading(64, swap_mib=8), 10.0)
    usage = account.into(Usage(cpu_seconds=1.5, peak_memory_bytes=99))
    assert usage.cpu_seconds == 1.5 and usage.peak_memory_bytes == 99
    assert usage.memory_mib_seconds == pytest.approx(640)
    assert (usage.working_set_bytes, usage.peak_working_set_bytes, usage.swap_bytes) == (64 * MIB, 64 * MIB, 8 * MIB)


class FakeCgroup:
    def __init__(self, values: list[float] | None):
        self.values, self.closed = values, False

    def memory_reading(self) -> MemoryReading:
        if not self.values:
            raise FileNotFoundError("gone")
        return reading(self.values.pop(0))

    def memory_usage_bytes(self) -> int:
        return self.memory_reading().usage_bytes

    def close(self) -> None:
        self.closed = True


class FakeDriver:
    def __init__(self, series: dict[str, list[float]]):
        self.series, self.made = series, {}

    def cgroup(self, path: str) -> FakeCgroup:
        self.made[path] = FakeCgroup(self.series.get(path.rsplit("/", 1)[-1]))
        return self.made[path]


def test_sampling_opens_accounts_integrates_and_closes_them():
    clock = iter([0.0, 1.0, 2.0, 3.0]).__next__
    driver = FakeDriver({"sb-a": [10, 20, 30], "sb-b": [], "n1": [100, 100, 100]})
    acc = MemoryAccounting(driver, "n1", clock=clock)
    acc.sample(["sb-a", "sb-b"])  # t=0; sb-b has no cgroup yet: no account
    assert acc.account("sb-b") is None
    acc.sample(["sb-a", "sb-b"])  # t=1
    usage = acc.close_account("sb-a", Usage())  # t=2: a last reading, then gone
    assert usage.memory_mib_seconds == pytest.approx(15 + 25)
    assert usage.peak_working_set_bytes == 30 * MIB
    assert acc.account("sb-a") is None and driver.made["/corral/n1/sb-a"].closed
    assert acc.node.mib_seconds == pytest.approx(100)  # the node cgroup: sampled on each pass
    assert acc.node.summary()["mib_seconds"] == 100


def test_a_sandbox_whose_cgroup_is_gone_keeps_its_last_account():
    clock = iter([0.0, 1.0, 5.0]).__next__
    acc = MemoryAccounting(FakeDriver({"sb-a": [10, 10]}), "n1", clock=clock)
    acc.sample(["sb-a"])
    acc.sample(["sb-a"])
    usage = acc.close_account("sb-a", Usage())  # cgroup removed by teardown: last pass counts
    assert usage.memory_mib_seconds == pytest.approx(10)


def test_prune_drops_accounts_of_sandboxes_that_are_gone():
    acc = MemoryAccounting(FakeDriver({"sb-a": [1], "sb-b": [1]}), "n1", clock=lambda: 0.0)
    acc.sample(["sb-a", "sb-b"])
    acc.prune({"sb-b"})
    assert acc.account("sb-a") is None and acc.account("sb-b") is not None


def test_memory_stat_is_read_every_few_passes_and_its_cache_subtracted_between():
    class CachedCgroup:
        """usage grows by 10 MiB a pass; 30 MiB of it is inactive page cache throughout."""

        def __init__(self):
            self.usage, self.stats = 100 * MIB, 0

        def memory_usage_bytes(self) -> int:
            self.usage += 10 * MIB
            return self.usage

        def memory_reading(self) -> MemoryReading:
            self.stats += 1
            usage = self.memory_usage_bytes()
            return MemoryReading(usage_bytes=usage, working_set_bytes=usage - 30 * MIB, swap_bytes=MIB)

        def close(self):
            pass

    cg = CachedCgroup()
    driver = type("D", (), {"cgroup": lambda self, path: cg})()
    acc = MemoryAccounting(driver, "n1", clock=iter(range(100)).__next__, stat_every=5)
    for _ in range(10):
        acc._sample_one("sb", acc.clock())
    assert cg.stats == 2  # passes 0 and 5
    account = acc.account("sb")
    assert account.working_set_bytes == cg.usage - 30 * MIB and account.swap_bytes == MIB
    acc.usage("sb", Usage())  # a usage read is always a full one
    assert cg.stats == 3
