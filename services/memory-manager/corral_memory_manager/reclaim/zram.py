"""Compressed swap in RAM (zram) for the node, set up once at start when the setting asks.

Idempotent: if a zram device is already active as swap (ours from an earlier start, or the
host's), nothing is done. Otherwise a new device is added through ``/sys/class/zram-control``
(never an existing ``zram0`` that may belong to the host), then ``mkswap`` and ``swapon`` from
util-linux. The host's own swap configuration is left as it was: nothing is turned off, and the
device stays on at shutdown (sandboxes' reclaimed pages live in it; ``swapoff`` would force them
all back into RAM at once). Undo by hand: ``swapoff /dev/zramN; echo N > /sys/class/zram-control/hot_remove``.
"""

import subprocess
from dataclasses import dataclass
from pathlib import Path

from corral_common.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class ZramSwap:
    device: str
    size_bytes: int
    created: bool  # False: one was active already


def active_zram_swaps(proc_swaps: str = "/proc/swaps") -> list[str]:
    lines = Path(proc_swaps).read_text().splitlines()[1:]
    return [line.split()[0] for line in lines if line.split() and "/zram" in line.split()[0]]


def ensure_zram_swap(size_bytes: int, algorithm: str = "lz4", priority: int = 100,
                     sys_root: str = "/sys") -> ZramSwap:
    """A zram swap of ``size_bytes`` (raises OSError / CalledProcessError when the host cannot)."""
    active = active_zram_swaps()
    if active:
        size = int(Path(f"{sys_root}/block/{Path(active[0]).name}/disksize").read_text())
        return ZramSwap(active[0], size, created=False)
    index = Path(f"{sys_root}/class/zram-control/hot_add").read_text().strip()
    block = Path(f"{sys_root}/block/zram{index}")
    device = f"/dev/zram{index}"
    try:
        algorithms = (block / "comp_algorithm").read_text()
        if algorithm in algorithms.replace("[", " ").replace("]", " ").split():
            (block / "comp_algorithm").write_text(algorithm)
        (block / "disksize").write_text(str(size_bytes))
        subprocess.run(["mkswap", device], check=True, capture_output=True, timeout=30)
        subprocess.run(["swapon", "-p", str(priority), device], check=True, capture_output=True, timeout=30)
    except BaseException:
        remove_zram(index, sys_root)
        raise
    log.info("zram.swap_on", device=device, size_bytes=size_bytes, algorithm=algorithm)
    return ZramSwap(device, size_bytes, created=True)


def remove_zram(index: str, sys_root: str = "/sys") -> None:
    """Turn a device of ours off and remove it (tests; never called at a normal shutdown)."""
    subprocess.run(["swapoff", f"/dev/zram{index}"], capture_output=True, timeout=120)
    try:
        Path(f"{sys_root}/class/zram-control/hot_remove").write_text(index)
    except OSError:
        log.warning("zram.remove_failed", index=index)
