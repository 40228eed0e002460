"""Per-worker cgroups (v1: memory, pids, cpuacct) for fncall runs.

Each pool slot (worker) owns one cgroup per controller under
``/sys/fs/cgroup/<controller>/corral-fncall/<node>/<worker>``. A slot runs one process tree
at a time, so before every run the limits are set and the peak/usage counters reset, and
after it every process still in the cgroup is killed. The sandboxed processes never see
these files (bwrap mounts no /sys).
"""

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "cpuacct")


def _write(path: Path, value: str | int) -> None:
    with open(path, "w") as fh:
        fh.write(str(value))


def _read(path: Path) -> str:
    with open(path) as fh:
        return fh.read()


@dataclass
class RunStats:
    cpu_ms: float
    peak_memory_kb: int
    oom_killed: bool
    pids_limited: bool


class WorkerCgroup:
    def __init__(self, group: str, root: Path = CGROUP_ROOT):
        self.dirs = {c: root / c / group for c in CONTROLLERS}
        self._oom_before = 0
        self._pids_before = 0
        self._baseline = 0
        self.has_memsw = False

    @staticmethod
    def available(root: Path = CGROUP_ROOT) -> bool:
        return all((root / c / "cgroup.procs").exists() for c in CONTROLLERS) and os.geteuid() == 0

    def create(self) -> "WorkerCgroup":
        for d in self.dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        self.has_memsw = (self.dirs["memory"] / "memory.memsw.limit_in_bytes").exists()
        if (self.dirs["memory"] / "memory.swappiness").exists():
            _write(self.dirs["memory"] / "memory.swappiness", 0)
        return self

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def _set_memory(self, limit: int) -> None:
        mem = self.dirs["memory"]
        files = [mem / "memory.limit_in_bytes"]
        if self.has_memsw:  # no escape into swap: memory+swap capped at the same value
            files.append(mem / "memory.memsw.limit_in_bytes")
        try:
            for f in files:
                _write(f, limit)
        except OSError:  # raising: memsw must be raised first (memsw >= mem at all times)
            for f in reversed(files):
                _write(f, limit)

    def prepare(self, memory_bytes: int, pids: int) -> None:
        """Before starting a process tree: empty the cgroup, set the limits, reset the counters."""
        self.kill_all()
        self._baseline = int(_read(self.dirs["memory"] / "memory.usage_in_bytes"))
        self.arm(memory_bytes, pids)

    def arm(self, memory_bytes: int, pids: int) -> None:
        """Set the limits and reset peak memory, cpu time and the OOM/pids counters (a
        pre-started process keeps running; raises OSError if it already uses more memory)."""
        mem = self.dirs["memory"]
        self._set_memory(memory_bytes)
        _write(self.dirs["pids"] / "pids.max", pids)
        _write(mem / "memory.max_usage_in_bytes", 0)
        if self.has_memsw:
            _write(mem / "memory.memsw.max_usage_in_bytes", 0)
        _write(self.dirs["cpuacct"] / "cpuacct.usage", 0)
        self._oom_before = self._oom_kills()
        self._pids_before = self._pids_max_events()

    def _oom_kills(self) -> int:
        for line in _read(self.dirs["memory"] / "memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return int(_read(self.dirs["memory"] / "memory.failcnt"))

    def _pids_max_events(self) -> int:
        try:
            for line in _read(self.dirs["pids"] / "pids.events").splitlines():
                if line.startswith("max "):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def stats(self) -> RunStats:
        mem = self.dirs["memory"]
        peak_file = mem / ("memory.memsw.max_usage_in_bytes" if self.has_memsw else "memory.max_usage_in_bytes")
        peak = max(0, int(_read(peak_file)) - self._baseline)
        return RunStats(cpu_ms=int(_read(self.dirs["cpuacct"] / "cpuacct.usage")) / 1e6,
                        peak_memory_kb=peak // 1024,
                        oom_killed=self._oom_kills() > self._oom_before,
                        pids_limited=self._pids_max_events() > self._pids_before)

    def cpu_ms(self) -> float:
        return int(_read(self.dirs["cpuacct"] / "cpuacct.usage")) / 1e6

    def pids(self) -> list[int]:
        return [int(p) for p in _read(self.dirs["pids"] / "cgroup.procs").split()]

    def kill_all(self, timeout: float = 2.0) -> None:
        """SIGKILL every process left in the worker's cgroup and wait until it is empty."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs.values():
            try:
                d.rmdir()
            except OSError:
                pass
