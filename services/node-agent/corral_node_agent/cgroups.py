"""Cgroups v1 (memory, pids, cpuacct) the node-agent creates itself: one per fncall worker,
one per VM's QEMU (containers get theirs from crun).

Each fncall pool slot (worker) owns one cgroup per controller under
``/sys/fs/cgroup/<controller>/corral-fncall/<node>/<worker>``. A slot runs one process tree
at a time, so before every run the limits are set and the peak/usage counters reset, and
after it every process still in the cgroup is killed. The sandboxed processes never see
these files (bwrap mounts no /sys).

The control files (not ``cgroup.procs``) are opened once and then read/written at offset 0
(``pread``/``pwrite``): a run touches ~15 of them, and opening a kernfs file costs more than
the read or write. A limit is only written when it differs from the one already set.
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


@dataclass
class RunStats:
    cpu_ms: float
    peak_memory_kb: int
    oom_killed: bool
    pids_limited: bool


class WorkerCgroup:
    def __init__(self, group: str, root: Path = CGROUP_ROOT):
        self.dirs = {c: root / c / group for c in CONTROLLERS}
        self._fds: dict[tuple[str, str, int], int] = {}
        self._limits: dict[str, int] = {}  # file -> value last written
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

    def _fd(self, controller: str, name: str, mode: int) -> int:
        key = (controller, name, mode)
        fd = self._fds.get(key)
        if fd is None:
            fd = self._fds[key] = os.open(self.dirs[controller] / name, mode | os.O_CLOEXEC)
        return fd

    def _read(self, controller: str, name: str) -> str:
        return os.pread(self._fd(controller, name, os.O_RDONLY), 65536, 0).decode()

    def _write(self, controller: str, name: str, value: int) -> None:
        os.pwrite(self._fd(controller, name, os.O_WRONLY), str(value).encode(), 0)

    def _set_limit(self, controller: str, name: str, value: int) -> None:
        if self._limits.get(name) != value:
            self._limits.pop(name, None)  # unknown if the write fails
            self._write(controller, name, value)
            self._limits[name] = value

    def close_files(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._limits.clear()

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def _set_memory(self, limit: int) -> None:
        files = ["memory.limit_in_bytes"]
        if self.has_memsw:  # no escape into swap: memory+swap capped at the same value
            files.append("memory.memsw.limit_in_bytes")
        try:
            for f in files:
                self._set_limit("memory", f, limit)
        except OSError:  # raising: memsw must be raised first (memsw >= mem at all times)
            for f in reversed(files):
                self._set_limit("memory", f, limit)

    def prepare(self, memory_bytes: int, pids: int, *, known_empty: bool = False) -> None:
        """Before starting a process tree: empty the cgroup (unless the caller emptied it
        after its last run), set the limits, reset the counters."""
        if not known_empty:
            self.kill_all()
        self._baseline = int(self._read("memory", "memory.usage_in_bytes"))
        self.arm(memory_bytes, pids)

    def arm(self, memory_bytes: int, pids: int) -> None:
        """Set the limits and reset peak memory, cpu time and the OOM/pids counters (a
        pre-started process keeps running; raises OSError if it already uses more memory)."""
        self._set_memory(memory_bytes)
        self._set_limit("pids", "pids.max", pids)
        self._write("memory", "memory.max_usage_in_bytes", 0)
        if self.has_memsw:
            self._write("memory", "memory.memsw.max_usage_in_bytes", 0)
        self._write("cpuacct", "cpuacct.usage", 0)
        self._oom_before = self._oom_kills()
        self._pids_before = self._pids_max_events()

    def _oom_kills(self) -> int:
        for line in self._read("memory", "memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return int(self._read("memory", "memory.failcnt"))

    def _pids_max_events(self) -> int:
        try:
            for line in self._read("pids", "pids.events").splitlines():
                if line.startswith("max "):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def stats(self) -> RunStats:
        peak_file = "memory.memsw.max_usage_in_bytes" if self.has_memsw else "memory.max_usage_in_bytes"
        peak = max(0, int(self._read("memory", peak_file)) - self._baseline)
        return RunStats(cpu_ms=self.cpu_ms(),
                        peak_memory_kb=peak // 1024,
                        oom_killed=self._oom_kills() > self._oom_before,
                        pids_limited=self._pids_max_events() > self._pids_before)

    def cpu_ms(self) -> float:
        return int(self._read("cpuacct", "cpuacct.usage")) / 1e6

    def pids(self) -> list[int]:
        # A fresh open every time: cgroup v1 keeps a pid list per open file for a second and a
        # re-read of the same fd may return that stale list.
        try:
            with open(self.dirs["pids"] / "cgroup.procs") as fh:
                return [int(p) for p in fh.read().split()]
        except FileNotFoundError:  # never created (or already removed)
            return []

    def kill_all(self, timeout: float = 2.0) -> bool:
        """SIGKILL every process left in the worker's cgroup and wait until it is empty
        (False if it is not within ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids:
                return True
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)

    def remove(self) -> None:
        self.kill_all()
        self.close_files()
        for d in self.dirs.values():
            try:
                d.rmdir()
            except OSError:
                pass
