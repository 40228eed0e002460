"""Keeps the running sandboxes' thin disks from filling the host (the hard watermark,
capacity/disk.py ``reservations``).

A container's disk is an ext4 filesystem on a loop device over a sparse image: it takes host
space as it is written, and a host filesystem that fills under it turns its writes into I/O
errors (and fills the host). While the host's free space is above the watermark nothing is
done. Below it, every ``CHECK_INTERVAL_S``:

- disks whose use went down (files deleted) are trimmed (FITRIM), so the loop device punches
  the freed blocks out of the image and the host gets them back;
- what is left above the hard watermark is split between the disks, and each disk's ext4 keeps
  the rest of its free space reserved (/sys/fs/ext4/loopN/reserved_clusters): the kernel checks
  it at every allocation, root's too, so a writer past its part gets ENOSPC at once, however
  fast it writes, and the host's free space stays above the hard watermark.

Back above the watermark every disk gets the kernel's own reservation again (also at the first
check after an agent start, for what a previous run left reserved).

Not covered: VM disks (the same image, but its ext4 is inside the guest, out of the host's
reach; QEMU's default werror=enospc pauses a VM whose write found the host full), and blocks a
sandbox fallocated before the host got short (unwritten extents: writing into them takes host
space without a new allocation in the sandbox's filesystem). docs/disk.md.
"""

import asyncio
import errno
import fcntl
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from corral_common.logging import get_logger
from corral_host import loopdev
from corral_node_agent.capacity import disk

log = get_logger(__name__)

CHECK_INTERVAL_S = 0.25
EXT4_SYSFS = "/sys/fs/ext4"
FITRIM = 0xC0185879  # _IOWR('X', 121, struct fstrim_range)
SUPERBLOCK_OFFSET = 1024
EXT4_FEATURE_INCOMPAT_64BIT = 0x80


@dataclass
class OpenDisk:
    """A running sandbox's disk as its backend hands it out: a descriptor of a directory on
    its filesystem (the caller closes it) and the image it is made from."""

    fd: int
    image: str


def loop_device(d: OpenDisk) -> str | None:
    """loopN of the disk's filesystem: the device of the descriptor, or (an overlay's root, for
    a container adopted from a previous agent run) the loop device bound to its image."""
    dev = os.fstat(d.fd).st_dev
    if os.major(dev) == loopdev.LOOP_MAJOR:
        return f"loop{os.minor(dev)}"
    found = loopdev.devices_backed_by(d.image)
    return os.path.basename(found[0]) if found else None


def kernel_reserve(image: str) -> int:
    """The reservation ext4 makes of its own accord (ext4_calculate_resv_clusters: 2% of the
    clusters, at most 4096), from the image's superblock."""
    with open(image, "rb") as fh:
        fh.seek(SUPERBLOCK_OFFSET)
        sb = fh.read(0x160)
    blocks = struct.unpack_from("<I", sb, 0x4)[0]
    if struct.unpack_from("<I", sb, 0x60)[0] & EXT4_FEATURE_INCOMPAT_64BIT:
        blocks |= struct.unpack_from("<I", sb, 0x150)[0] << 32
    return min(blocks // 50, 4096)


def _read_int(path: str) -> int:
    with open(path) as fh:
        return int(fh.read())


def _write_int(path: str, value: int) -> None:
    with open(path, "w") as fh:
        fh.write(str(value))


def trim(fd: int) -> None:
    """Give the host back the blocks the disk's filesystem freed (its loop device punches them
    out of the image). An overlay's root (adopted) cannot be trimmed: left as it is."""
    fstrim_range = bytearray(struct.pack("QQQ", 0, 2**64 - 1, 0))
    try:
        fcntl.ioctl(fd, FITRIM, fstrim_range)
    except OSError as exc:
        if exc.errno not in (errno.ENOTTY, errno.EOPNOTSUPP, errno.EINVAL):
            raise


@dataclass
class _Seen:
    default_reserve: int
    used: int  # clusters in use at the last check
    reserved: int  # what we last wrote


class DiskPressure:
    """The check (``check``, in a worker thread) and its loop (``run_forever``)."""

    def __init__(self, state_dir: str, free_reserve_mb: int, open_disks: Callable[[], list[OpenDisk]],
                 disk_limit_bytes: Callable[[], int], share: float = 1.0):
        self.state_dir = state_dir
        self.hard_bytes = disk.hard_reserve_mb(free_reserve_mb) * disk.MIB
        # Agents sharing one host (and filesystem) split the room as they split cpu and memory.
        self.share = share
        self.open_disks = open_disks  # on the event loop
        self.disk_limit_bytes = disk_limit_bytes  # what the disks could take at most (their disk_mb)
        # (loopN, image) -> what the last check saw and set (a loop device is reused by later disks)
        self._seen: dict[tuple[str, str], _Seen] = {}
        self._checked = False

    def room_bytes(self) -> int:
        """This node's part of what is left above the hard watermark."""
        return int((self.host_free_bytes() - self.hard_bytes) * self.share)

    def needed(self) -> bool:
        """Whether a check may change anything: not while the disks' whole sizes fit in the
        room and none is held back (the common case, checked without a call per disk), except
        once at start (for what a previous run of the agent left reserved)."""
        if not self._checked or self.restricting():
            return True
        if self.room_bytes() >= self.disk_limit_bytes():
            self._seen.clear()  # all at the kernel's reservation: nothing to remember
            return False
        return True

    def host_free_bytes(self) -> int:
        st = os.statvfs(disk.existing(self.state_dir))
        return st.f_bavail * st.f_frsize

    def restricting(self) -> bool:
        """Whether some disk is held below its own free space."""
        return any(s.reserved != s.default_reserve for s in self._seen.values())

    def check(self, disks: list[OpenDisk]) -> None:
        """One check; closes the descriptors of ``disks``."""
        try:
            self._check(disks)
        finally:
            for d in disks:
                os.close(d.fd)

    def _check(self, disks: list[OpenDisk]) -> None:
        found: list[tuple[str, OpenDisk, os.statvfs_result, int, int]] = []
        for d in disks:
            try:
                name = loop_device(d)
                if name is None:
                    continue
                st = os.fstatvfs(d.fd)
                seen = self._seen.get((name, d.image))
                if seen is not None and st.f_blocks - st.f_bfree < seen.used:
                    trim(d.fd)  # files were deleted: the host gets their blocks back
                    st = os.fstatvfs(d.fd)
                default = seen.default_reserve if seen is not None else kernel_reserve(d.image)
                pending = _read_int(f"{EXT4_SYSFS}/{name}/delayed_allocation_blocks")
                found.append((name, d, st, default, pending))
            except OSError as exc:  # it ended meanwhile
                log.debug("disk.check_skipped", image=d.image, error=str(exc))
        room = self.room_bytes()  # after the trims
        growth: list[disk.DiskGrowth] = []
        for name, d, st, default, pending in found:
            seen = self._seen.get((name, d.image))
            used = st.f_blocks - st.f_bfree
            growth.append(disk.DiskGrowth(free=st.f_bfree, default_reserve=default, pending=pending,
                                          grew=max(0, used - seen.used) if seen is not None else 0,
                                          cluster_bytes=st.f_frsize))
        was = self.restricting()
        seen_now: dict[tuple[str, str], _Seen] = {}
        for (name, d, st, _, _), g, reserve in zip(found, growth, disk.reservations(room, growth), strict=True):
            previous = self._seen.get((name, d.image))
            try:
                if previous is None or previous.reserved != reserve:
                    _write_int(f"{EXT4_SYSFS}/{name}/reserved_clusters", reserve)
            except OSError as exc:
                log.debug("disk.reserve_failed", image=d.image, error=str(exc))
                continue
            seen_now[(name, d.image)] = _Seen(default_reserve=g.default_reserve, used=st.f_blocks - st.f_bfree, reserved=reserve)
        self._seen = seen_now
        self._checked = True
        if self.restricting() != was:
            log.info("disk.pressure" if not was else "disk.pressure_over", disks=len(found),
                     host_free_mb=self.host_free_bytes() // disk.MIB, hard_mb=self.hard_bytes // disk.MIB)

    async def run_forever(self) -> None:
        while True:
            spent = 0.0
            try:
                if await asyncio.to_thread(self.needed):
                    started = time.monotonic()
                    await asyncio.to_thread(self.check, self.open_disks())
                    spent = time.monotonic() - started
            except Exception:
                log.exception("disk.pressure_check_failed")
            # At most a tenth of a core however many disks (the reservations hold between checks).
            await asyncio.sleep(max(CHECK_INTERVAL_S, 10 * spent))
