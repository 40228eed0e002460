"""What the node-agent needs from a cgroup, whatever the cgroup version.

Three runtimes use it: crun containers (crun creates their cgroup; the agent reads usage,
settles the freezer and removes it), each VM's QEMU and each fncall worker (the agent creates
those itself, sets the limits before every run and kills what is left after it). A driver per
cgroup version implements `CgroupDriver` and `Cgroup` (v1.py, v2.py); `detect.cgroup_driver()`
picks one. Nothing above the drivers knows which version runs: a runtime that reads the
hierarchy itself (crun) is handed `Cgroup.runtime_path`, and what a limit means is the same on
both (memory without swap, tasks, cpu time).

Counters are "since the last `reset_counters()`" (or since the cgroup was created, for a
container's, which is never reset): a fncall worker runs many process trees in one cgroup.
"""

import errno
import os
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

CPU_PERIOD_US = 100_000  # the cfs period cpu limits are set with (crun's default too)


def cpu_quota_us(cpu: float) -> int:
    """``cpu`` cores as cpu time per period (the kernel takes no quota below 1 ms)."""
    return max(1000, round(cpu * CPU_PERIOD_US))


def cpu_burst_us(cpu: float | None) -> int:
    """How much unused quota a capped cgroup may bank for later (CFS burst, Linux 5.14): one
    period's quota, the most the kernel allows; 0 when uncapped. Starting a command costs ~1.0-1.3
    ms of cpu inside the sandbox's cgroup (crun exec joins it, then setns, seccomp, execve),
    a whole period's quota at cpu 0.01: without a bank the second of two commands in a row
    waited out the period, ~100 ms (measured: exec p90 103 -> 16 ms on the first of three
    in a row). Over any longer stretch the cgroup still gets no more than its quota."""
    return 0 if cpu is None else cpu_quota_us(cpu)


@dataclass(frozen=True)
class RunStats:
    cpu_ns: int = 0
    peak_memory_bytes: int = 0
    oom_kills: int = 0  # processes the kernel's OOM killer killed inside the cgroup
    pids_limited: bool = False  # a fork failed against the pids limit

    @property
    def cpu_ms(self) -> float:
        return self.cpu_ns / 1e6

    @property
    def peak_memory_kb(self) -> int:
        return self.peak_memory_bytes // 1024

    @property
    def oom_killed(self) -> bool:
        return self.oom_kills > 0


@dataclass(frozen=True)
class MemoryReading:
    """A cgroup's memory now (for the node's memory·time accounting and the memory-manager).

    ``working_set_bytes`` is what the cgroup uses less its inactive page cache (the kernel's
    first reclaim candidates, cAdvisor's and the kubelet's definition); ``swap_bytes`` is what
    reclaim moved out to swap (zram), counted beside, not in, the working set.
    """

    usage_bytes: int = 0
    working_set_bytes: int = 0
    swap_bytes: int = 0


class Cgroup(ABC):
    """One cgroup, named by its path below the node's cgroup root (``/corral/n1/sb-1``): the
    root of every v1 controller, or on v2 the cgroup the node was delegated (often the root)."""

    path: str

    @property
    def runtime_path(self) -> str:
        """The path for a runtime that finds the cgroup itself below /sys/fs/cgroup (crun's
        ``linux.cgroupsPath``)."""
        return self.path

    @abstractmethod
    def create(self) -> Self:
        """Create it (and its parents) in the controllers the node caps and accounts with."""

    @abstractmethod
    def set_limits(self, memory_bytes: int, pids: int, cpu: float | None = None) -> None:
        """Cap memory (and no swap on top, where the host accounts swap), the number of tasks
        and (``cpu``, in cores; None: unlimited) cpu time. Raises OSError, and leaves the memory
        cap as it was, when the cgroup uses more memory than the new cap and cannot give it back."""

    @abstractmethod
    def cap_cpu(self, cpu: float | None) -> None:
        """Cap cpu time at ``cpu`` cores (None: lift the cap), with its burst: for a cgroup a
        runtime put its tasks in. crun joins every hierarchy there is, so on v1 this writes the
        cpu one even where the node's own processes do not join it (V1Driver.joined), and
        raises OSError where there is none. ``set_limits`` caps through it."""

    @abstractmethod
    def _set_cpu_burst(self, cpu: float | None) -> None:
        """Let a cgroup capped at ``cpu`` cores bank what it leaves unused (``cpu_burst_us``);
        part of every cap. A kernel without CFS burst is left as it is."""

    def _set_cpu_cap(self, write_cap: Callable[[], None], cpu: float | None) -> None:
        """Write a cpu cap (``write_cap``) and its burst: a burst banked under the old cap that
        exceeds the new quota makes the kernel refuse it (EINVAL), so then the burst goes first."""
        try:
            write_cap()
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            self._set_cpu_burst(cpu)
            write_cap()
        self._set_cpu_burst(cpu)

    @abstractmethod
    def reset_counters(self) -> None:
        """Peak memory, cpu time, OOM kills and pids-limit hits start from zero."""

    @abstractmethod
    def stats(self) -> RunStats:
        """Raises OSError if the cgroup does not exist."""

    @abstractmethod
    def memory_reading(self) -> MemoryReading:
        """Two reads of kept descriptors (cheap: sampled every second for every sandbox).
        Raises OSError if the cgroup does not exist."""

    @abstractmethod
    def memory_usage_bytes(self) -> int:
        """Memory charged now, page cache included: one small read (the sampler's every-pass read,
        memory.stat's inactive page cache being re-read only every few passes)."""

    def reclaim(self, nbytes: int) -> bool:
        """Ask the kernel to reclaim up to ``nbytes`` from it (v2's ``memory.reclaim``); False
        where there is no such interface (v1) or nothing more could go. Never OOM-kills."""
        return False

    @abstractmethod
    def cpu_ms(self) -> float:
        """Cpu time of every task (cheap: polled while a run goes on)."""

    @abstractmethod
    def oom_kills(self) -> int:
        """How many tasks the OOM killer killed: the one answer to "was it OOM-killed?"."""

    @abstractmethod
    def procs_files(self) -> list[str]:
        """The files a process writes its pid to to join the cgroup (one per controller)."""

    @abstractmethod
    def pids(self) -> list[int]:
        """Processes in this cgroup itself (not below); [] if it does not exist."""

    @abstractmethod
    def populated(self) -> bool:
        """Whether any process is in this cgroup or below."""

    @abstractmethod
    def is_frozen(self) -> bool:
        """Whether its tasks are frozen (a paused sandbox), read only; False if it is gone."""

    @abstractmethod
    def child_names(self) -> list[str]:
        """The names of the cgroups right below it ([] if it does not exist)."""

    @abstractmethod
    def freeze(self) -> bool:
        """Ask for every task to be frozen; True once they all are (call again until then)."""

    @abstractmethod
    def thaw(self) -> None:
        pass

    @abstractmethod
    def remove(self) -> None:
        """Kill every process in it and below, then delete it and its children; what is
        missing or still busy is left alone."""

    @abstractmethod
    def remove_if_empty(self) -> None:
        """Delete it only if it has neither processes nor children (never kills)."""

    @abstractmethod
    def close(self) -> None:
        """Release what the object holds open (it can be used again afterwards)."""

    def kill_all(self, timeout: float = 2.0) -> bool:
        """SIGKILL every process in the cgroup and wait until it is empty (False if it is
        not within ``timeout``)."""
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

    def prepare(self, memory_bytes: int, pids: int, cpu: float | None = None, *, known_empty: bool = False) -> None:
        """Before starting a process tree in a reused cgroup: empty it (unless the caller
        emptied it after its last run), set the limits, reset the counters."""
        if not known_empty:
            self.kill_all()
        self.set_limits(memory_bytes, pids, cpu)
        self.reset_counters()


class CgroupDriver(ABC):
    """One cgroup version's view of this host (as seen from the agent's mount namespace)."""

    name: str
    swap_limit: bool  # set_limits keeps tasks out of swap (and crun can be told to)

    @abstractmethod
    def available(self) -> bool:
        """Whether the node can create, cap and account cgroups of its own here."""

    @abstractmethod
    def cgroup(self, path: str, keep_files: bool = False) -> Cgroup:
        """The cgroup at ``path`` (nothing is created until ``create()``). ``keep_files``: its
        control files stay open between reads (files.py: for cgroups reused run after run, not
        for one per sandbox)."""
