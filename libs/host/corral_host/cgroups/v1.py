"""Cgroup v1: every controller is its own hierarchy, found through /proc/self/mountinfo.

The node creates memory, pids and cpuacct (and cpu, where mounted with cpuacct) cgroups for itself
(``/corral/<node>``, capped: node.py), each fncall worker (``/corral/<node>/_fncall-<instance>/<worker>``)
and each VM's QEMU (``/corral/<node>/<sandbox>``); crun creates a container's
(``/corral/<node>/<sandbox>``) in every hierarchy. The sandboxed processes never see these
files (bwrap mounts no /sys; a container's /sys/fs/cgroup is read-only).

Control files are kept open (files.py); ``cgroup.procs`` is opened afresh every time: v1 keeps a
pid list per open file for a second, so a re-read of the same fd may miss a process that just joined.

"Was it OOM-killed?" has one answer: ``memory.oom_control``'s ``oom_kill`` counter (Linux
4.13+). ``memory.failcnt`` is not a fallback: it counts every time usage hit the limit and the
kernel reclaimed, which a run that fills its page cache does without anything being killed.
"""

import errno
import os
import shutil
from pathlib import Path
from typing import Self

from corral_host import mounts
from corral_host.cgroups.base import (
    CPU_PERIOD_US,
    Cgroup,
    CgroupDriver,
    MemoryReading,
    RunStats,
    cpu_burst_us,
    cpu_quota_us,
)
from corral_host.cgroups.files import ControlFiles, keyed_value
from corral_host.cgroups.mounts import CGROUP_UNIFIED, MOUNTINFO, cgroup_mounts

CONTROLLERS = ("memory", "pids", "cpuacct")  # what the node needs to create, cap and join
_READ = ("memory", "pids", "cpuacct", "cpu", "freezer")  # what it reads or writes


class V1Driver(CgroupDriver):
    name = "v1"

    def __init__(self, mountinfo: str = MOUNTINFO) -> None:
        self.mounts: dict[str, str] = {}  # controller (or name=) -> mount point
        for mount in cgroup_mounts(mountinfo):
            if mount.fstype != "cgroup":
                continue
            for opt in mount.options:
                if opt in ("rw", "ro") or "=" in opt and not opt.startswith("name="):
                    continue
                self.mounts.setdefault(opt, mount.point)
        # The hierarchies a cgroup is made in and a process joins. cpu (for cpu limits) only
        # where it shares cpuacct's hierarchy ("cpu,cpuacct", systemd's layout): a hierarchy of
        # its own would cost every fncall run one more attach (~0.1 ms here) for a limit no
        # caller sets on v1 (a container's cap is written with cap_cpu: crun joins every hierarchy).
        cpu_too = "cpu" in self.mounts and self.mounts.get("cpu") == self.mounts.get("cpuacct")
        self.joined = (*CONTROLLERS, "cpu") if cpu_too else CONTROLLERS
        # With the cgroup2 mount hidden, crun still writes a `cgroup.procs` *regular file*
        # into the now-plain tmpfs directory /sys/fs/cgroup/unified<path>. That tmpfs is the
        # host's, so the litter would outlive us: it is removed like a cgroup.
        self.stray_root: str | None = None
        if os.path.isdir(CGROUP_UNIFIED) and not mounts.is_mountpoint(CGROUP_UNIFIED):
            self.stray_root = CGROUP_UNIFIED
        memory = self.mounts.get("memory")
        self.swap_limit = memory is not None and os.path.exists(f"{memory}/memory.memsw.limit_in_bytes")

    def available(self) -> bool:
        return all(c in self.mounts for c in CONTROLLERS) and os.geteuid() == 0

    def cgroup(self, path: str, keep_files: bool = False) -> "V1Cgroup":
        return V1Cgroup(self, path, keep_files)


class V1Cgroup(Cgroup):
    def __init__(self, driver: V1Driver, path: str, keep_files: bool = False):
        self.driver = driver
        self.path = "/" + path.strip("/")
        self.dirs = {c: Path(f"{driver.mounts[c]}{self.path}") for c in _READ if c in driver.mounts}
        self.files = ControlFiles(keep=keep_files)
        self._baseline = 0  # memory in use when the counters were reset (page cache of earlier runs)
        self._oom_before = 0
        self._pids_before = 0

    # ---- control files ------------------------------------------------------------------

    def _file(self, controller: str, name: str) -> str:
        if controller not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "no cgroup v1 hierarchy", controller)
        return str(self.dirs[controller] / name)

    def _read(self, controller: str, name: str) -> str:
        return self.files.read(self._file(controller, name))

    def _write(self, controller: str, name: str, value: int | str) -> None:
        self.files.write(self._file(controller, name), value)

    def _set_limit(self, controller: str, name: str, value: int) -> None:
        self.files.set_limit(self._file(controller, name), value)

    def close(self) -> None:
        self.files.close()

    # ---- limits and counters ------------------------------------------------------------

    def create(self) -> Self:
        for c in self.driver.joined:
            self.dirs[c].mkdir(parents=True, exist_ok=True)
        if (self.dirs["memory"] / "memory.swappiness").exists():
            (self.dirs["memory"] / "memory.swappiness").write_text("0")
        return self

    def _set_memory(self, limit: int) -> None:
        files = ["memory.limit_in_bytes"]
        if self.driver.swap_limit:  # no escape into swap: memory+swap capped at the same value
            files.append("memory.memsw.limit_in_bytes")
        try:
            for f in files:
                self._set_limit("memory", f, limit)
        except OSError:  # raising: memsw must be raised first (memsw >= mem at all times)
            for f in reversed(files):
                self._set_limit("memory", f, limit)

    def _set_cpu(self, cpu: float | None) -> None:
        if "cpu" not in self.driver.joined:
            if cpu is None:
                return
            raise OSError(errno.EOPNOTSUPP, "cpu limits need the cpu controller mounted with cpuacct", "cpu")
        if cpu is None and self.files.last_written(self._file("cpu", "cpu.cfs_quota_us")) is None:
            return  # never limited by us: nothing to lift
        self.cap_cpu(cpu)

    def cap_cpu(self, cpu: float | None) -> None:
        self._set_limit("cpu", "cpu.cfs_period_us", CPU_PERIOD_US)
        quota = -1 if cpu is None else cpu_quota_us(cpu)
        self._set_cpu_cap(lambda: self._set_limit("cpu", "cpu.cfs_quota_us", quota), cpu)

    def _set_cpu_burst(self, cpu: float | None) -> None:
        try:
            self._set_limit("cpu", "cpu.cfs_burst_us", cpu_burst_us(cpu))
        except FileNotFoundError:  # before Linux 5.14 (or no cpu hierarchy)
            pass

    def set_limits(self, memory_bytes: int, pids: int, cpu: float | None = None) -> None:
        self._set_limit("pids", "pids.max", pids)  # first: a memory cap below usage raises
        self._set_memory(memory_bytes)
        self._set_cpu(cpu)

    def _memory_file(self, name: str) -> str:
        # memory+swap where the host accounts swap: that is what the limit caps.
        return f"memory.memsw.{name}" if self.driver.swap_limit else f"memory.{name}"

    def reset_counters(self) -> None:
        self._write("memory", "memory.max_usage_in_bytes", 0)
        if self.driver.swap_limit:
            self._write("memory", "memory.memsw.max_usage_in_bytes", 0)
        self._write("cpuacct", "cpuacct.usage", 0)
        self._baseline = int(self._read("memory", self._memory_file("usage_in_bytes")))
        self._oom_before = self._oom_kills()
        self._pids_before = self._pids_max_events()

    def _oom_kills(self) -> int:
        return self.files.counter(self._file("memory", "memory.oom_control"), "oom_kill")

    def _pids_max_events(self) -> int:
        try:
            return self.files.counter(self._file("pids", "pids.events"), "max")
        except OSError:
            return 0

    def oom_kills(self) -> int:
        return self._oom_kills() - self._oom_before

    def memory_usage_bytes(self) -> int:
        return int(self._read("memory", "memory.usage_in_bytes"))

    def memory_reading(self) -> MemoryReading:
        usage = self.memory_usage_bytes()
        stat = self._read("memory", "memory.stat")
        return MemoryReading(usage_bytes=usage,
                             working_set_bytes=max(0, usage - keyed_value(stat, "total_inactive_file")),
                             swap_bytes=keyed_value(stat, "total_swap"))

    def cpu_ms(self) -> float:
        return int(self._read("cpuacct", "cpuacct.usage")) / 1e6

    def stats(self) -> RunStats:
        peak = int(self._read("memory", self._memory_file("max_usage_in_bytes")))
        return RunStats(cpu_ns=int(self._read("cpuacct", "cpuacct.usage")),
                        peak_memory_bytes=max(0, peak - self._baseline),
                        oom_kills=self.oom_kills(),
                        pids_limited=self._pids_max_events() > self._pids_before)

    # ---- processes ----------------------------------------------------------------------

    def procs_files(self) -> list[str]:
        # One per hierarchy (co-mounted controllers, e.g. cpu,cpuacct, share one).
        return list(dict.fromkeys(str(self.dirs[c] / "cgroup.procs") for c in self.driver.joined))

    def pids(self) -> list[int]:
        try:
            with open(self.dirs["pids"] / "cgroup.procs") as fh:  # fresh: see the module docstring
                return [int(p) for p in fh.read().split()]
        except (FileNotFoundError, KeyError):  # never created (or already removed)
            return []

    def _subtree(self) -> list["V1Cgroup"]:
        """This cgroup and every cgroup below it, children first."""
        base = self.dirs.get("pids")
        if base is None or not base.is_dir():
            return [self]
        below = sorted((d for d, _, _ in os.walk(base) if d != str(base)), key=len, reverse=True)
        return [*(self.driver.cgroup(self.path + d[len(str(base)):]) for d in below), self]

    def populated(self) -> bool:
        return any(cg.pids() for cg in self._subtree())

    def is_frozen(self) -> bool:
        try:
            return self._read("freezer", "freezer.state").strip() == "FROZEN"
        except OSError:
            return False

    def child_names(self) -> list[str]:
        base = self.dirs.get("memory")
        try:
            return sorted(d.name for d in base.iterdir() if d.is_dir()) if base is not None else []
        except FileNotFoundError:
            return []

    def freeze(self) -> bool:
        # v1 may stay FREEZING while a task is busy; writing FROZEN again retries (the
        # kernel's documented way), hence one step per call.
        if self._read("freezer", "freezer.state").strip() == "FROZEN":
            return True
        self._write("freezer", "freezer.state", "FROZEN")
        return False

    def thaw(self) -> None:
        self._write("freezer", "freezer.state", "THAWED")

    def remove(self) -> None:
        self.close()
        for cg in self._subtree():
            cg.kill_all()
        for mnt in set(self.driver.mounts.values()):
            base = f"{mnt}{self.path}"
            if not os.path.isdir(base):
                continue
            for dirpath, _dirs, _files in sorted(os.walk(base), key=lambda t: len(t[0]), reverse=True):
                try:
                    os.rmdir(dirpath)
                except OSError:
                    pass
        if self.driver.stray_root and self.path != "/":
            shutil.rmtree(f"{self.driver.stray_root}{self.path}", ignore_errors=True)

    def remove_if_empty(self) -> None:
        self.close()
        roots = set(self.driver.mounts.values()) | ({self.driver.stray_root} if self.driver.stray_root else set())
        for mnt in roots:
            try:
                os.rmdir(f"{mnt}{self.path}")
            except OSError:
                pass
