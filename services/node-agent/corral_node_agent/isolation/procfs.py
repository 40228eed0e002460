"""What a sandbox sees of the host kernel's /proc and /sys: masked and read-only paths, the
same lists for every kind that shares the host kernel.

- Masked (read as empty: a file is covered by /dev/null, a directory by an empty read-only
  tmpfs, for containers one node-wide tmpfs bound over each: backends/container/shared_mounts.py): the OCI/runc default list, plus what a sandbox root could otherwise read of the
  host: ``/proc/kpage*`` (every physical page's flags, map count and memory cgroup),
  ``/proc/slabinfo`` (kernel allocator state, used to steer heap exploits),
  ``/proc/cmdline`` (the host's boot parameters; an empty one is the neutral line: a file of
  our own bound there would show its host path in /proc/self/mountinfo, /dev/null does not),
  ``/proc/config.gz`` (the host kernel's build configuration: which subsystems and
  hardenings an exploit can count on) and ``/sys/kernel/mm`` (the host's memory management
  tunables and state: transparent hugepages, KSM, NUMA, DAMON, swap).
  What cannot be masked this way (/proc/cpuinfo, /proc/meminfo, uname...) is listed in
  docs/security.md.
- Read-only: the runc default (kernel tunables, sysrq, irq and bus settings).

Containers: crun applies ``maskedPaths``/``readonlyPaths`` (backends/container/oci.py
renders them). fncall: bwrap mounts a fresh /proc per run and the zygote's children one per
call; both cover the masked /proc paths that this kernel has and that the run (host uid
nobody, no capability) could read (fncall/executor.py, fncall/zygote_main.py; bwrap itself
keeps /proc/sys, sysrq-trigger, irq and bus read-only, and mounts no /sys). VMs: the guest has a kernel of its own, nothing of the host's shows.
"""

import os
import stat

MASKED_PATHS = (
    "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
    "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
    "/proc/kpagecount", "/proc/kpageflags", "/proc/kpagecgroup", "/proc/slabinfo", "/proc/cmdline",
    "/proc/config.gz", "/sys/kernel/mm",
)
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")


def masked_directories(root: str = "") -> tuple[str, ...]:
    """The masked paths that are directories on this kernel (``root``: where its /proc and
    /sys are seen); a container binds an empty directory over each (a bind over a path the
    kernel lacks would fail the start)."""
    return tuple(p for p in MASKED_PATHS if os.path.isdir(root + p) and not os.path.islink(root + p))


def present_masks(proc: str = "/proc") -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(files, directories) that a fresh /proc of an fncall run must cover: the masked /proc
    paths this kernel has (a mount over a missing path would fail) that the run could read.
    The run is the host's ``nobody`` without any capability, so the root-only ones (kpage*,
    slabinfo, timer_list, kcore: mode 0400) already fail with EACCES: covering them too would
    cost ~0.15 ms of bwrap's CPU per mount and per run, for nothing."""
    files, dirs = [], []
    for path in MASKED_PATHS:
        if not path.startswith("/proc/"):
            continue  # fncall mounts no /sys
        try:
            st = os.stat(proc + path.removeprefix("/proc"))
        except OSError:
            continue
        if not st.st_mode & stat.S_IROTH:
            continue
        (dirs if stat.S_ISDIR(st.st_mode) else files).append(path)
    return tuple(files), tuple(dirs)
