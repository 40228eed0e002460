"""The node's disk watermark: sandbox disks are thin (sparse images that take host space only
as they are written), so their disk requests are what placement counts and the host's real
free space is what stops it. Past the watermark the node advertises no room: new sandboxes
wait (their record says "disk"), running ones keep what they have."""

import os

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


def room_mb(path: str, free_reserve_mb: int) -> int:
    """MiB sandboxes may still take on the filesystem of ``path`` before the watermark (<= 0: none)."""
    st = os.statvfs(existing(path))
    return st.f_bavail * st.f_frsize // MIB - free_reserve_mb


def advertised_disk_mb(capacity_mb: int, used_mb: int, room: int) -> int:
    """What the node advertises to the scheduler: its capacity, but never more than what its
    sandboxes hold (``used_mb``, their requests) plus the room left above the watermark, so
    the scheduler's free disk (advertised - reserved) is at most that room."""
    return max(0, min(capacity_mb, used_mb + max(0, room)))
