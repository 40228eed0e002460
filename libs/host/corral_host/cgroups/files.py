"""A cgroup's control files, read or written at offset 0.

``keep=True`` (fncall's few, reused worker cgroups): each file is opened once and then
``pread``/``pwrite``: a fncall run touches ~15 control files, and opening a kernfs file costs
more than the read or write (2.5 µs kept vs 11 µs open-read-close for memory.usage_in_bytes).
``keep=False`` (one cgroup per sandbox): opened for each read or write, because descriptors a
node keeps per sandbox bound how many sandboxes its RLIMIT_NOFILE holds (the node-agent's capacity/open_files.py),
and at 10,000 sandboxes the difference is ~0.1 s of cpu per memory sampling pass. ``fd()``
always keeps (v2's memory.peak, once reset, reads per open file: only the descriptor the reset
was written through sees it). A limit is only written when it differs
from the one this object last wrote. ``cgroup.procs`` is never kept (v1 keeps a pid list per
open file for a second, so a re-read of the same fd may miss a process that just joined).
"""

import os


class ControlFiles:
    def __init__(self, *, keep: bool) -> None:
        self.keep = keep
        self._fds: dict[tuple[str, int], int] = {}
        self._limits: dict[str, str] = {}  # file -> value last written

    def fd(self, path: str, mode: int = os.O_RDONLY) -> int:
        key = (path, mode)
        fd = self._fds.get(key)
        if fd is None:
            fd = self._fds[key] = os.open(path, mode | os.O_CLOEXEC)
        return fd

    def read(self, path: str) -> str:
        if self.keep:
            return os.pread(self.fd(path), 65536, 0).decode()
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.read(fd, 65536).decode()
        finally:
            os.close(fd)

    def write(self, path: str, value: int | str) -> None:
        if self.keep:
            os.pwrite(self.fd(path, os.O_WRONLY), str(value).encode(), 0)
            return
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, str(value).encode())
        finally:
            os.close(fd)

    def set_limit(self, path: str, value: int | str) -> bool:
        """Write ``value`` unless it is the one last written; True if it was written."""
        value = str(value)
        if self._limits.get(path) == value:
            return False
        self._limits.pop(path, None)  # unknown if the write fails
        self.write(path, value)
        self._limits[path] = value
        return True

    def last_written(self, path: str) -> str | None:
        return self._limits.get(path)

    def counter(self, path: str, key: str) -> int:
        """``key``'s value in a flat-keyed file ("key value" per line); 0 if it is absent."""
        return flat_keyed(self.read(path)).get(key, 0)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._limits.clear()


def flat_keyed(text: str) -> dict[str, int]:
    """``memory.events``, ``cpu.stat``, ``pids.events``, v1's ``memory.oom_control``..."""
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        try:
            values[key] = int(value)
        except ValueError:
            pass
    return values


def keyed_value(text: str, key: str) -> int:
    """One key's value in a flat-keyed file, found without parsing every line (memory.stat has
    ~70: sampled every second for every sandbox); 0 if it is absent."""
    start = 0 if text.startswith(key + " ") else text.find("\n" + key + " ") + 1
    if start == 0 and not text.startswith(key + " "):
        return 0
    end = text.find("\n", start)
    try:
        return int(text[start + len(key) + 1:end if end >= 0 else None])
    except ValueError:
        return 0
