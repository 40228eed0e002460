"""Page a process's memory out to swap: ``process_madvise(pidfd, ranges, MADV_PAGEOUT)``.

The host-side lever on cgroup v1, which has no ``memory.reclaim`` (HOST-NOTES: 300 MiB in
0.29 s, the process keeps running and touching a page again costs ~5 µs). Chosen over the other
v1 lever, a temporary ``memory.limit_in_bytes`` squeeze, because it changes no setting of the
sandbox: a manager that dies half-way leaves nothing to undo, and it cannot push a sandbox into
its OOM killer. It also ignores the cgroup's ``memory.swappiness`` (0 for sandboxes, so that
the kernel's own limit reclaim never swaps them). Without swap, anonymous pages stay where they
are and only clean file pages are dropped.

Linux 5.10+, CAP_SYS_NICE and ptrace-read access to the target (root here). No DAMON and no
page_idle: which pages are cold is decided per sandbox (policy.py): all of an idle one's are.
"""

import ctypes
import errno
import os

MADV_PAGEOUT = 21
_SYS_PROCESS_MADVISE = 440  # x86_64 and aarch64 share the number
_IOV_BATCH = 512  # below UIO_MAXIOV (1024)
_SKIP = ("[vsyscall]", "[vvar]", "[vdso]", "[vvar_vclock]")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def mapped_ranges(maps_text: str, keep_code: bool = False) -> list[tuple[int, int]]:
    """(start, length) of every mapping in a /proc/PID/maps text but the kernel's own;
    ``keep_code``: also leave out executable mappings and QEMU's TCG code buffer."""
    ranges = []
    for line in maps_text.splitlines():
        parts = line.split(maxsplit=5)
        if not parts or (len(parts) == 6 and parts[5].strip() in _SKIP):
            continue
        if keep_code and len(parts) > 1 and ("x" in parts[1] or (len(parts) == 6 and "tcg-jit" in parts[5])):
            continue
        start, _, end = parts[0].partition("-")
        begin, finish = int(start, 16), int(end, 16)
        if finish > begin:
            ranges.append((begin, finish - begin))
    return ranges


def _advise(pidfd: int, ranges: list[tuple[int, int]]) -> int:
    iov = (_Iovec * len(ranges))(*[_Iovec(start, length) for start, length in ranges])
    done = _libc.syscall(_SYS_PROCESS_MADVISE, pidfd, iov, len(ranges), MADV_PAGEOUT, 0)
    if done < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return done


def page_out(pid: int, keep_code: bool = False) -> int:
    """Ask the kernel to page out every mapping of ``pid`` (but code, with ``keep_code``); bytes
    of ranges advised (not bytes moved: the caller measures that in the cgroup). 0 if the
    process is gone."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return 0
    try:
        try:
            with open(f"/proc/{pid}/maps") as fh:
                ranges = mapped_ranges(fh.read(), keep_code)
        except (FileNotFoundError, ProcessLookupError):
            return 0
        advised = 0
        for i in range(0, len(ranges), _IOV_BATCH):
            batch = ranges[i:i + _IOV_BATCH]
            try:
                advised += _advise(pidfd, batch)
            except OSError as exc:
                if exc.errno == errno.ESRCH:
                    return advised
                # One mapping the kernel refuses (locked, PFN-mapped, unmapped meanwhile) fails
                # the whole vector: advise the batch's mappings one by one instead.
                for one in batch:
                    try:
                        advised += _advise(pidfd, [one])
                    except OSError:
                        continue
        return advised
    finally:
        os.close(pidfd)
