"""The node's disk watermark: sandbox disks are thin (sparse images that take host space only
as they are written), so their disk requests are what placement counts and the host's real
free space is what stops it. Past the watermark the node advertises no room: new sandboxes
wait (their record says "disk"), and running ones may write only what is left above the
hard watermark below it (``reservations``)."""

import os
from dataclasses import dataclass

MIB = 1024 * 1024
MIN_FREE_RESERVE_MB = 1024


def existing(path: str) -> str:
    """``path`` or its nearest existing parent (a state dir made later)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def default_free_reserve_mb(path: str) -> int:
    """Kept free on the filesystem of ``path``: 5% of it, at least MIN_FREE_RESERVE_MB."""
    st = os.statvfs(existing(path))
    return max(MIN_FREE_RESERVE_MB, st.f_blocks * st.f_frsize // 20 // MIB)


def free_reserve_mb(configured_mb: int | None, path: str) -> int:
    """The watermark's reserve: the setting, unset the default for the filesystem of ``path``."""
    return configured_mb if configured_mb is not None else default_free_reserve_mb(path)


def room_mb(path: str, free_reserve_mb: int, share: float = 1.0) -> int:
    """MiB this node's sandboxes may still take on the filesystem of ``path`` before the
    watermark (<= 0: none): its ``share`` (host_share) of it, as agents sharing one host (and
    filesystem) split it like cpu, memory and pids."""
    st = os.statvfs(existing(path))
    room = st.f_bavail * st.f_frsize // MIB - free_reserve_mb
    return int(room * share) if room > 0 else room


def advertised_disk_mb(capacity_mb: int, used_mb: int, room: int) -> int:
    """What the node advertises to the scheduler: its capacity, but never more than what its
    sandboxes hold (``used_mb``, their requests) plus the room left above the watermark, so
    the scheduler's free disk (advertised - reserved) is at most that room."""
    return max(0, min(capacity_mb, used_mb + max(0, room)))


# ---- the hard watermark: what running sandboxes may still write ------------------------------
#
# The sandboxes already running could together still fill the host: their disks are thin, each
# may grow to its disk_mb. So whenever their sizes exceed what is left above the hard watermark
# (half the reserve), the node splits that room between their disks, and each disk's filesystem
# is told to keep the rest of its free space reserved (ext4's reserved_clusters, which binds
# root too): a writer past its part gets ENOSPC from its own filesystem, checked by the kernel
# at write(2), so no writer can outrun the check (disks/pressure.py applies it).


def hard_reserve_mb(free_reserve_mb: int) -> int:
    """MiB the host keeps free whatever the running sandboxes write: half the watermark's reserve."""
    return free_reserve_mb // 2


def hard_reserve_bytes(configured_mb: int | None, path: str) -> int:
    """The hard watermark in bytes for the reserve setting (unset: the default for ``path``)."""
    return hard_reserve_mb(free_reserve_mb(configured_mb, path)) * MIB


@dataclass(frozen=True)
class DiskGrowth:
    """A running sandbox's disk, as its filesystem reports it (units: that filesystem's clusters)."""

    free: int  # free and not promised to dirty pages (statvfs f_bfree)
    default_reserve: int  # what the kernel keeps reserved of its own accord
    pending: int  # accepted into the page cache, not yet on the host (delayed allocation)
    grew: int  # clusters it took since the previous check
    cluster_bytes: int = 4096


def reservations(room_bytes: int, disks: list[DiskGrowth]) -> list[int]:
    """The reserved_clusters each disk gets so that together they take at most ``room_bytes``
    more of the host (less what their dirty pages will take anyway): half of it split evenly,
    half by what each took since the last check (the writers of the moment get most of it, an
    idle disk still its even part). Never below the kernel's own reserve: a disk whose free
    space is within its allowance keeps that."""
    room = max(0, room_bytes - sum(d.pending * d.cluster_bytes for d in disks))
    grew = sum(d.grew for d in disks)
    out = []
    for d in disks:
        share = 1 / len(disks) if grew == 0 else 0.5 / len(disks) + 0.5 * d.grew / grew
        allowance = int(room * share) // d.cluster_bytes
        out.append(max(d.default_reserve, d.free - allowance))
    return out
