"""Stand-in cgroups for the reclaim loop's unit tests: cpu time grows at a set rate on a fake clock."""

from corral_host.cgroups.base import MemoryReading

MIB = 1 << 20


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeCgroup:
    def __init__(self, rate_cores: float, clock: Clock):
        self.rate, self.clock, self._cpu, self._at = rate_cores, clock, 0.0, 0.0

    def cpu_ms(self) -> float:
        self._cpu += self.rate * (self.clock.now - self._at) * 1000
        self._at = self.clock.now
        return self._cpu

    def memory_reading(self) -> MemoryReading:
        return MemoryReading(usage_bytes=200 * MIB, working_set_bytes=200 * MIB)

    def is_frozen(self) -> bool:
        return False

    def pids(self) -> list[int]:
        return []  # nothing to page out: the decision is what is tested

    def reclaim(self, nbytes: int) -> bool:
        return False

    def child_names(self) -> list[str]:
        return []

    def close(self) -> None:
        pass


class FakeDriver:
    def __init__(self, clock: Clock, rates: dict[str, float]):
        self.clock, self.rates = clock, rates
        self.cgroups = {sid: FakeCgroup(rate, clock) for sid, rate in rates.items()}

    def available(self) -> bool:
        return True

    def cgroup(self, path: str):
        name = path.rsplit("/", 1)[-1]
        if name in self.cgroups:
            return self.cgroups[name]
        node = FakeCgroup(0, self.clock)
        node.child_names = lambda: list(self.cgroups)
        return node
