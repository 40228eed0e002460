"""Reads the host's memory state from /proc and /sys, and sets the KSM knobs.

Nothing here ever writes under DAMON's sysfs: a kdamond that is not ours may run on the host
(and changing ``nr_kdamonds`` while one runs fails with EBUSY anyway). Whether DAMON could be
used is found by reading its admin tree only. The only files written are KSM's
``run``, ``pages_to_scan`` and ``sleep_millisecs``.
"""

import errno
import os
import threading
from pathlib import Path

from corral_common.web.errors import ServiceUnavailable, Unprocessable

from .schemas import (
    DamonState,
    HostMemory,
    Kdamond,
    KsmState,
    KsmUpdate,
    MemInfo,
    SwapDevice,
    ZramDevice,
)

_DAMON_MODULES = ("damon_reclaim", "damon_lru_sort", "damon_stat")
_KSM_COUNTERS = ("run", "pages_to_scan", "sleep_millisecs", "pages_shared", "pages_sharing", "pages_unshared",
                 "full_scans")


def _read(path: Path) -> str | None:
    """A small sysfs/procfs file's text, or None if it does not exist or cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def parse_meminfo(text: str) -> dict[str, int]:
    """``Key:   123 kB`` lines → {key: bytes}. Lines without a unit (HugePages_*) are counts."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts:
            continue
        try:
            number = int(parts[0])
        except ValueError:
            continue
        unit = parts[1].lower() if len(parts) > 1 else ""
        values[key.strip()] = number * 1024 if unit == "kb" else number
    return values


def parse_swaps(text: str) -> list[SwapDevice]:
    """/proc/swaps: a header, then ``Filename Type Size Used Priority`` (sizes in KiB).

    A filename with spaces is written with octal escapes by the kernel (``\\040``), so splitting
    on whitespace is safe; the escapes are decoded.
    """
    devices = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 5:
            continue
        try:
            size, used, priority = int(parts[2]), int(parts[3]), int(parts[4])
        except ValueError:
            continue
        filename = _unescape_octal(parts[0])
        devices.append(SwapDevice(filename=filename, type=parts[1], size_bytes=size * 1024, used_bytes=used * 1024,
                                  priority=priority, zram=os.path.basename(filename).startswith("zram")))
    return devices


def _unescape_octal(s: str) -> str:
    if "\\" not in s:
        return s
    out, i = bytearray(), 0
    raw = s.encode()
    while i < len(raw):
        chunk = raw[i:i + 4]
        if len(chunk) == 4 and chunk[0:1] == b"\\" and all(48 <= c <= 55 for c in chunk[1:]):
            out.append(int(chunk[1:], 8))
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return out.decode(errors="replace")


def _selected(choice_list: str | None) -> str | None:
    """``lzo [lz4] zstd`` → ``lz4`` (the bracketed entry), as sysfs lists its choices."""
    if choice_list is None:
        return None
    for word in choice_list.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return choice_list or None


class HostMemoryService:
    def __init__(self, node_id: str, proc_root: str = "/proc", sys_root: str = "/sys", page_size: int | None = None):
        self.node_id = node_id
        self.proc = Path(proc_root)
        self.sys = Path(sys_root)
        self.page_size = page_size or os.sysconf("SC_PAGE_SIZE")
        self._ksm_lock = threading.Lock()

    @property
    def ksm_dir(self) -> Path:
        return self.sys / "kernel/mm/ksm"

    @property
    def damon_admin(self) -> Path:
        return self.sys / "kernel/mm/damon/admin"

    # ---- reading -------------------------------------------------------------------------

    def snapshot(self) -> HostMemory:
        swaps = self.swaps()
        return HostMemory(node_id=self.node_id, page_size=self.page_size, meminfo=self.meminfo(), ksm=self.ksm(),
                          damon=self.damon(), swaps=swaps, zram=self.zram(swaps))

    def meminfo(self) -> MemInfo:
        text = _read(self.proc / "meminfo")
        if text is None:
            raise ServiceUnavailable(f"cannot read {self.proc / 'meminfo'}", code="meminfo_unavailable")
        v = parse_meminfo(text)
        if "MemTotal" not in v:
            raise ServiceUnavailable("/proc/meminfo has no MemTotal", code="meminfo_unavailable")
        free = v.get("MemFree", 0)
        swap_total, swap_free = v.get("SwapTotal", 0), v.get("SwapFree", 0)
        return MemInfo(total_bytes=v["MemTotal"], available_bytes=v.get("MemAvailable", free), free_bytes=free,
                       cached_bytes=v.get("Cached", 0), buffers_bytes=v.get("Buffers", 0),
                       swap_total_bytes=swap_total, swap_free_bytes=swap_free,
                       swap_used_bytes=max(swap_total - swap_free, 0))

    def ksm(self) -> KsmState:
        if not self.ksm_dir.is_dir():
            return KsmState(present=False)
        values = {name: _read_int(self.ksm_dir / name) for name in _KSM_COUNTERS}
        return KsmState(present=True, **values, saved_bytes=(values["pages_sharing"] or 0) * self.page_size)

    def damon(self) -> DamonState:
        modules = [m for m in _DAMON_MODULES
                   if (_read(self.sys / "module" / m / "parameters/enabled") or "").upper() in ("Y", "1")]
        admin = self.damon_admin
        if not admin.is_dir():
            if modules:
                return DamonState(status="busy", reason=f"no sysfs admin interface; {', '.join(modules)} enabled",
                                  modules_enabled=modules)
            return DamonState(status="absent", reason=f"{admin} does not exist (kernel without DAMON_SYSFS)")
        kdamonds_dir = admin / "kdamonds"
        nr = _read_int(kdamonds_dir / "nr_kdamonds")
        if nr is None:
            return DamonState(status="absent", modules_enabled=modules,
                              reason=f"{kdamonds_dir / 'nr_kdamonds'} is missing or not readable (needs root)")
        kdamonds = []
        for entry in sorted((p for p in kdamonds_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
            kdamonds.append(Kdamond(index=int(entry.name), state=_read(entry / "state"), pid=_read_int(entry / "pid")))
        running = [k for k in kdamonds if k.state == "on"]
        if running or modules:
            who = [f"kdamond {k.index} (pid {k.pid})" for k in running] + [f"module {m}" for m in modules]
            return DamonState(status="busy", reason=f"already running: {', '.join(who)}", kdamonds=kdamonds,
                              modules_enabled=modules)
        return DamonState(status="available", reason=f"{nr} kdamond(s) configured, none running",
                          kdamonds=kdamonds)

    def swaps(self) -> list[SwapDevice]:
        text = _read(self.proc / "swaps")
        return parse_swaps(text) if text else []

    def zram(self, swaps: list[SwapDevice] | None = None) -> list[ZramDevice]:
        in_swap = {os.path.basename(s.filename) for s in (swaps if swaps is not None else self.swaps())}
        block = self.sys / "block"
        devices = []
        if block.is_dir():
            for dev in sorted(p for p in block.iterdir() if p.name.startswith("zram")):
                devices.append(ZramDevice(name=dev.name, disksize_bytes=_read_int(dev / "disksize"),
                                          comp_algorithm=_selected(_read(dev / "comp_algorithm")),
                                          swap=dev.name in in_swap))
        return devices

    # ---- writing (KSM only) --------------------------------------------------------------

    def set_ksm(self, update: KsmUpdate) -> KsmState:
        if not self.ksm_dir.is_dir():
            raise ServiceUnavailable(f"{self.ksm_dir} does not exist (kernel without KSM)", code="ksm_absent")
        # Tunables first, so a scanner that is being started runs with them from its first pass.
        writes = [(name, getattr(update, name)) for name in ("pages_to_scan", "sleep_millisecs")
                  if getattr(update, name) is not None]
        writes.append(("run", update.run))
        with self._ksm_lock:
            for name, value in writes:
                path = self.ksm_dir / name
                try:
                    with open(path, "w") as fh:
                        fh.write(f"{value}\n")
                except OSError as exc:
                    if exc.errno in (errno.EINVAL, errno.ERANGE):
                        raise Unprocessable(f"kernel refused {name}={value}: {exc.strerror}", loc=["body", name],
                                            code="ksm_value_refused") from exc
                    raise ServiceUnavailable(f"cannot write {path}: {exc.strerror}", code="ksm_not_writable",
                                             loc=["body", name]) from exc
        return self.ksm()
