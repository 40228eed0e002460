"""Cgroup v2: one unified hierarchy, its controllers handed down from the top.

Where: the paths node.py names (``/corral/<node>/...``) sit below the driver's *base*, the
nearest cgroup at or above the agent's own that is delegated to it (systemd marks a
``Delegate=yes`` unit's cgroup with the ``trusted.delegate``/``user.delegate`` xattr), else the
root of the cgroup2 mount (the host's root cgroup, or a pod's cgroup-namespace root).

Controllers: a cgroup's children get a controller only once it is in the cgroup's
``cgroup.subtree_control``, which takes only what its own ``cgroup.controllers`` offers (its
parent's subtree_control). `create()` enables memory and pids (required) and cpu and io (where
offered) on the base and every cgroup below it down to the new cgroup's parent, then makes it.
"No internal processes": a non-root cgroup that holds processes cannot enable domain controllers
for its children (EBUSY). The node's own cgroups never hold processes (only leaves do), so the
one place this bites is the base when the agent itself sits there (a delegated service cgroup,
a cgroup-namespace root): its processes move to ``<base>/corral-agent`` before anything is
enabled there, as systemd asks of a service that manages its own subtree. (Not after an EBUSY:
cpu and pids are threaded controllers, which a cgroup with processes may enable, turning it into
a thread root that refuses memory for good.) The true root is exempt, so on a host that delegates
nothing the agent stays where it is (its service's cgroup) and the node's tree starts at the root.

Limits: ``memory.max``; ``memory.swap.max`` 0 (v1 caps memory+swap at the memory cap, which
is the same: no swap); ``pids.max``; ``cpu.max`` "<quota> <period>". A memory cap below what
the cgroup uses: v1 refuses it after reclaiming (EBUSY), v2 would OOM-kill to get there, so it
is refused the v1 way: ``memory.reclaim`` (5.19+) is asked for the difference, and if usage is
still above the cap, OSError(EBUSY) and the old cap stays.

Counters: v2 resets none of them; cpu.stat ``usage_usec``, memory.events ``oom_kill`` and
pids.events ``max`` are read against their values at `reset_counters()`. ``memory.peak``
(5.19+) is reset per open file by a write (6.12+; the file is kept open for it). Where it cannot
be, a reused cgroup's peak is the highest since it was made: exact for a run that set a new
high, an upper bound otherwise; before 5.19 it is the usage when read.

Kill: ``cgroup.kill`` (5.14+) SIGKILLs the whole subtree at once, frozen tasks included (older
kernels: process by process). Freeze: ``cgroup.freeze``, done once cgroup.events says frozen.
"""

import errno
import os
import time
from pathlib import Path
from typing import Self

from corral_host.cgroups.base import (
    CPU_PERIOD_US,
    Cgroup,
    CgroupDriver,
    MemoryReading,
    RunStats,
    cpu_burst_us,
    cpu_quota_us,
)
from corral_host.cgroups.files import ControlFiles, flat_keyed, keyed_value
from corral_host.cgroups.mounts import MOUNTINFO, CgroupMount, cgroup_mounts

SELF_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"  # where crun looks for the hierarchy (and the mount preferred here)
REQUIRED = ("memory", "pids")
ENABLED = ("cpu", "io", "memory", "pids")  # handed down to the node's cgroups where offered
AGENT_LEAF = "corral-agent"  # where the processes of the base go when it must enable controllers
DELEGATE_XATTRS = ("trusted.delegate", "user.delegate")
_NO_HIERARCHY = "/dev/null/no-cgroup2"  # a directory that cannot exist (an unavailable driver's paths)


def render_cpu_max(cpu: float | None) -> str:
    """``cpu.max`` for ``cpu`` cores (None: unlimited)."""
    return f"{'max' if cpu is None else cpu_quota_us(cpu)} {CPU_PERIOD_US}"


def own_cgroup(self_cgroup: str = SELF_CGROUP) -> str | None:
    """This process's cgroup in the unified hierarchy (the ``0::`` line), None without one."""
    try:
        with open(self_cgroup) as fh:
            for line in fh:
                hierarchy, _, rest = line.rstrip("\n").partition(":")
                controllers, _, path = rest.partition(":")
                if hierarchy == "0" and controllers == "":
                    return path
    except FileNotFoundError:
        pass
    return None


def delegated(directory: str) -> bool:
    for name in DELEGATE_XATTRS:
        try:
            if os.getxattr(directory, name) == b"1":
                return True
        except OSError:
            pass
    return False


def _words(path: Path) -> list[str]:
    return path.read_text().split()


def _write(path: Path | str, value: int | str) -> None:
    """One write(2) to an existing control file (never O_CREAT: a kernfs directory refuses
    to create files with EACCES, which would hide that the file is missing)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


class V2Driver(CgroupDriver):
    name = "v2"

    def __init__(self, mountinfo: str = MOUNTINFO, self_cgroup: str = SELF_CGROUP) -> None:
        mounts = [m for m in cgroup_mounts(mountinfo) if m.fstype == "cgroup2"]
        mount = next((m for m in mounts if m.point == CGROUP_ROOT), mounts[0] if mounts else None)
        self.mount = mount.point if mount else None
        own = own_cgroup(self_cgroup)
        self.base = self._find_base(mount, own) if mount and own is not None else "/"
        self._swap_limit: bool | None = None

    def _find_base(self, mount: CgroupMount, own: str) -> str:
        """The nearest delegated cgroup at or above ``own`` (relative to the mount), else "/"."""
        root = mount.root.rstrip("/")
        if root and own != root and not own.startswith(root + "/"):
            return "/"  # the agent's cgroup is not below what this mount shows
        path = own[len(root):] or "/"
        while path != "/":
            if delegated(f"{mount.point}{path}"):
                return path
            path = os.path.dirname(path)
        return "/"

    # ---- where ----------------------------------------------------------------------------

    def runtime_path(self, path: str) -> str:
        """``path`` below the base, as a path below the mount (what crun is given)."""
        return self.base.rstrip("/") + ("/" + path.strip("/") if path.strip("/") else "") or "/"

    def directory(self, path: str) -> Path:
        return Path(f"{self.mount or _NO_HIERARCHY}{self.runtime_path(path)}".rstrip("/") or "/")

    # ---- what ------------------------------------------------------------------------------

    def available(self) -> bool:
        if os.geteuid() != 0 or self.mount is None:
            return False
        try:
            offered = _words(self.directory("/") / "cgroup.controllers")
        except OSError:
            return False
        return all(c in offered for c in REQUIRED)

    @property
    def swap_limit(self) -> bool:
        """Whether the kernel accounts swap per cgroup: ``memory.swap.max`` is in every non-root
        cgroup with the memory controller then (not with ``swapaccount=0``)."""
        if self._swap_limit is None:
            self._swap_limit = self._swap_accounted()
        return self._swap_limit

    def _swap_accounted(self) -> bool:
        base = self.directory("/")
        try:
            candidates = [base, *sorted(p for p in base.iterdir() if p.is_dir())]
        except OSError:
            candidates = []
        for directory in candidates:
            if (directory / "memory.max").exists():
                return (directory / "memory.swap.max").exists()
        try:
            with open("/proc/cmdline") as fh:
                return "swapaccount=0" not in fh.read().split()
        except OSError:
            return False

    def cgroup(self, path: str, keep_files: bool = False) -> "V2Cgroup":
        return V2Cgroup(self, path, keep_files)

    # ---- controllers -----------------------------------------------------------------------

    def hand_down(self, path: str) -> None:
        """Make ``path``'s ancestors below the base, each with the controllers enabled for its
        children (the base's too)."""
        if self.mount is None:
            raise FileNotFoundError(errno.ENOENT, "no cgroup2 hierarchy mounted", CGROUP_ROOT)
        directory = self.directory("/")
        self._enable(directory, is_base=True)
        for part in path.strip("/").split("/")[:-1]:
            directory = directory / part
            directory.mkdir(exist_ok=True)
            self._enable(directory)

    def _enable(self, directory: Path, *, is_base: bool = False) -> None:
        offered = _words(directory / "cgroup.controllers")
        enabled = _words(directory / "cgroup.subtree_control")
        control = directory / "cgroup.subtree_control"
        for controller in (c for c in REQUIRED if c not in offered):
            raise OSError(errno.EOPNOTSUPP, f"the {controller} controller is not available here", str(directory))
        missing = [c for c in ENABLED if c in offered and c not in enabled]
        if missing and is_base and (directory / "cgroup.events").exists():  # not the true root
            # Before any write: cpu and pids are threaded controllers, which a cgroup holding
            # processes may enable, and it then becomes a thread root that refuses memory and io
            # (EOPNOTSUPP) for good.
            self.evacuate(directory)
        for controller in missing:
            try:
                _write(control, f"+{controller}")
            except OSError:
                if controller in REQUIRED:
                    raise
                # cpu or io refused (e.g. cpu with realtime tasks in the way): no such limit

    @staticmethod
    def evacuate(directory: Path) -> bool:
        """Move the processes of ``directory`` (the agent, and whatever shares its cgroup) into
        its AGENT_LEAF child, so that it may enable controllers; False if it held none."""
        moved = False
        for _attempt in range(3):  # a process may fork while the others move
            pids = _words(directory / "cgroup.procs")
            if not pids:
                break
            leaf = directory / AGENT_LEAF
            leaf.mkdir(exist_ok=True)
            for pid in pids:
                try:
                    _write(leaf / "cgroup.procs", pid)  # one pid per write(2)
                    moved = True
                except ProcessLookupError:
                    pass
        return moved


class V2Cgroup(Cgroup):
    def __init__(self, driver: V2Driver, path: str, keep_files: bool = False):
        self.driver = driver
        self.path = "/" + path.strip("/")
        self.dir = driver.directory(self.path)
        self.files = ControlFiles(keep=keep_files)
        self._cpu_before = 0  # usec
        self._oom_before = 0
        self._pids_before = 0
        self._baseline = 0  # memory in use when the counters were reset (page cache of earlier runs)
        self._peak_resettable = False  # memory.peak was reset through the kept O_RDWR descriptor

    @property
    def runtime_path(self) -> str:
        return self.driver.runtime_path(self.path)

    def _file(self, name: str) -> str:
        return str(self.dir / name)

    def _counter(self, name: str, key: str) -> int:
        return self.files.counter(self._file(name), key)

    def close(self) -> None:
        self.files.close()
        self._peak_resettable = False

    # ---- limits ----------------------------------------------------------------------------

    def create(self) -> Self:
        self.driver.hand_down(self.path)
        self.dir.mkdir(exist_ok=True)
        return self

    def set_limits(self, memory_bytes: int, pids: int, cpu: float | None = None) -> None:
        self.files.set_limit(self._file("pids.max"), pids)  # first: a memory cap below usage raises
        self._set_memory(memory_bytes)
        try:
            self.files.set_limit(self._file("memory.swap.max"), 0)
        except FileNotFoundError:  # the kernel accounts no swap per cgroup
            pass
        if cpu is not None or self.files.last_written(self._file("cpu.max")) is not None:
            self.cap_cpu(cpu)

    def cap_cpu(self, cpu: float | None) -> None:
        cpu_max = self._file("cpu.max")
        self._set_cpu_cap(lambda: self.files.set_limit(cpu_max, render_cpu_max(cpu)), cpu)

    def _set_cpu_burst(self, cpu: float | None) -> None:
        try:
            self.files.set_limit(self._file("cpu.max.burst"), cpu_burst_us(cpu))
        except FileNotFoundError:  # before Linux 5.14, or the cpu controller not enabled here
            pass

    def reclaim(self, nbytes: int) -> bool:
        try:
            _write(self._file("memory.reclaim"), max(0, nbytes))
        except OSError:  # EAGAIN: not all of it could go; ENOENT: a kernel before 5.19
            return False
        return True

    def _set_memory(self, limit: int) -> None:
        path = self._file("memory.max")
        if self.files.last_written(path) == str(limit):
            return
        current = int(self.files.read(self._file("memory.current")))
        if current > limit:
            try:
                _write(self._file("memory.reclaim"), current - limit)
            except OSError:  # EAGAIN: not all of it could go; ENOENT: a kernel before 5.19
                pass
            current = int(self.files.read(self._file("memory.current")))
            if current > limit:
                raise OSError(errno.EBUSY, f"{current} bytes in use, above the new memory cap of {limit}", path)
        self.files.set_limit(path, limit)

    # ---- counters --------------------------------------------------------------------------

    def _usage_usec(self) -> int:
        return self._counter("cpu.stat", "usage_usec")

    def _oom_total(self) -> int:
        return self._counter("memory.events", "oom_kill")

    def _pids_max_events(self) -> int:
        try:
            return self._counter("pids.events", "max")
        except OSError:
            return 0

    def _reset_peak(self) -> bool:
        try:
            os.pwrite(self.files.fd(self._file("memory.peak"), os.O_RDWR), b"reset", 0)
        except OSError:  # before 6.12 memory.peak is read-only (before 5.19 it is not there)
            return False
        return True

    def _peak(self) -> int:
        path = self._file("memory.peak")
        try:
            if self._peak_resettable:  # a reset holds only for the descriptor it was written through
                return int(os.pread(self.files.fd(path, os.O_RDWR), 64, 0))
            return int(self.files.read(path))  # kept or not, as the cgroup's other files
        except FileNotFoundError:
            if not self.dir.is_dir():
                raise
            return int(self.files.read(self._file("memory.current")))

    def reset_counters(self) -> None:
        self._cpu_before = self._usage_usec()
        self._oom_before = self._oom_total()
        self._pids_before = self._pids_max_events()
        self._baseline = int(self.files.read(self._file("memory.current")))
        self._peak_resettable = self._reset_peak()

    def oom_kills(self) -> int:
        return self._oom_total() - self._oom_before

    def cpu_ms(self) -> float:
        return (self._usage_usec() - self._cpu_before) / 1000

    def memory_usage_bytes(self) -> int:
        return int(self.files.read(self._file("memory.current")))

    def memory_reading(self) -> MemoryReading:
        usage = self.memory_usage_bytes()
        stat = self.files.read(self._file("memory.stat"))
        try:
            swap = int(self.files.read(self._file("memory.swap.current")))
        except OSError:  # no swap accounting on this host
            swap = 0
        return MemoryReading(usage_bytes=usage, working_set_bytes=max(0, usage - keyed_value(stat, "inactive_file")),
                             swap_bytes=swap)

    def stats(self) -> RunStats:
        return RunStats(cpu_ns=(self._usage_usec() - self._cpu_before) * 1000,
                        peak_memory_bytes=max(0, self._peak() - self._baseline),
                        oom_kills=self.oom_kills(),
                        pids_limited=self._pids_max_events() > self._pids_before)

    # ---- processes -------------------------------------------------------------------------

    def procs_files(self) -> list[str]:
        return [self._file("cgroup.procs")]

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in _words(self.dir / "cgroup.procs")]
        except FileNotFoundError:  # never created (or already removed)
            return []

    def populated(self) -> bool:
        try:
            return flat_keyed((self.dir / "cgroup.events").read_text()).get("populated") == 1
        except FileNotFoundError:
            return False

    def is_frozen(self) -> bool:
        try:
            return flat_keyed((self.dir / "cgroup.events").read_text()).get("frozen") == 1
        except OSError:
            return False

    def child_names(self) -> list[str]:
        try:
            return sorted(d.name for d in self.dir.iterdir() if d.is_dir())
        except FileNotFoundError:
            return []

    def freeze(self) -> bool:
        _write(self.dir / "cgroup.freeze", 1)  # not cached: crun pause/resume write it too
        return flat_keyed((self.dir / "cgroup.events").read_text()).get("frozen") == 1

    def thaw(self) -> None:
        _write(self.dir / "cgroup.freeze", 0)

    def kill_all(self, timeout: float = 2.0) -> bool:
        """SIGKILL every process in the cgroup and below (``cgroup.kill``) and wait until none
        is left (False if some still are after ``timeout``)."""
        try:
            _write(self.dir / "cgroup.kill", 1)
        except FileNotFoundError:
            if not self.dir.is_dir():
                return True  # no cgroup, no process
            return super().kill_all(timeout)  # a kernel before 5.14
        deadline = time.monotonic() + timeout
        while self.populated():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def remove(self) -> None:
        self.close()
        if not self.dir.is_dir():
            return
        self.kill_all()
        for dirpath, _dirs, _files in os.walk(self.dir, topdown=False):  # children first
            below = self.driver.cgroup(self.path + dirpath[len(str(self.dir)):])
            if below.pids():  # without cgroup.kill only this cgroup's went (or one just joined)
                below.kill_all()
            try:
                os.rmdir(dirpath)
            except OSError:
                pass

    def remove_if_empty(self) -> None:
        self.close()
        try:
            os.rmdir(self.dir)
        except OSError:
            pass
