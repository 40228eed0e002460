"""The disk that holds what a sandbox writes, sized by its quota (isolation/quota.py).

Every container and VM sandbox gets a filesystem of its own, an ext4 image file in the
sandbox's directory whose free space is disk_mb (``UpperDisks``, one per backend):

- containers: the image is attached to a loop device and mounted as the overlay's upper
  (``UpperDisks.mount``, called by backends/container/bundle.py); at teardown ``discard``
  drops its unwritten data, the agent unmounts it and the device clears itself;
- VMs: the same image is the guest's upper, a virtio-blk disk the guest's init mounts
  (backends/vm/backend.py, guest/init.sh): the guest's RAM holds none of it;
- fncall runs: ``/work`` and ``/tmp`` stay tmpfs of the run's memory limit (their pages are
  charged to the run's memory cgroup, so the memory limit caps them together): only the
  ``DiskQuota`` applies there.

Why a filesystem per sandbox rather than project quotas on a shared one (measured on the
reference host, docs/disk.md): a full disk is ENOSPC for everyone who writes into it, the
sandbox's processes, overlay copy-ups and the root agent serving the files API alike (ext4's
generic quota lets CAP_SYS_RESOURCE exceed hard limits), there is no project id a sandbox's
own files could be moved out of (FS_IOC_FSSETXATTR by a file's owner), nothing depends on
the kernel's quota options (the reference kernel has neither CONFIG_XFS_QUOTA nor
CONFIG_QFMT_V2), and bytes written land in the page cache of a block device, never in shmem.

What it costs is kept off the create path: mkfs runs once per size (a template, of which a
sandbox's image is a sparse copy), and for the two sizes most recently asked for a pool
keeps disks made and mounted ahead (``pool``), so a container's create only renames an
image and moves a mount (~0.1 ms; ~4 ms when it has to make its disk).

Containers' images are thin by default: they take host space as they are written, and
disks/pressure.py keeps what the running ones write above the node's hard watermark. VMs'
images, and containers' with ``disk_preallocate``, are preallocated (``preallocate``,
fallocate(2): unwritten extents, no I/O), never below the hard watermark (``keep_free_bytes``),
so a host filesystem short of room fails the next create with a clear error instead of failing
the writes of sandboxes that stay within their quota.
"""

import errno
import fcntl
import os
import queue
import shutil
import subprocess
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from corral_common.logging import get_logger
from corral_host import files, loopdev, mounts
from corral_node_agent.disks.pressure import OpenDisk
from corral_node_agent.errors import RuntimeFailure, Unavailable
from corral_node_agent.isolation.quota import MIB, DiskQuota

log = get_logger(__name__)

BLOCK = 4096
# mkfs.ext4 for a throwaway filesystem: no journal (it dies with its sandbox, a host crash
# loses the sandbox anyway), no blocks reserved for root, no room kept for online resizing,
# one inode per 8 KiB, and no zeroing (the image file reads as zeros until written).
MKFS_ARGS = ["-q", "-F", "-t", "ext4", "-b", str(BLOCK), "-m", "0", "-i", "8192", "-I", "256",
             "-O", "^has_journal,^resize_inode", "-L", "corral-upper"]
MKFS_EXTENDED = "nodiscard,lazy_itable_init=1,assume_storage_prezeroed=1"
MKFS_EXTENDED_OLD = "nodiscard,lazy_itable_init=1"  # e2fsprogs < 1.47
# The kernel must not zero inode tables in the background either (they are zeros already).
MOUNT_OPTIONS = "noinit_itable"
# The free space of a template may exceed disk_mb by this much (ext4's overhead is not linear).
TOLERANCE = MIB
TEMPLATES_KEPT = 32
# Ready disks kept mounted for the sizes most recently asked for (containers): a create then
# only moves one into place. Sizes above POOL_MAX_MB are never kept ready (preallocated
# idle disks of that size would hold too much of the host's disk).
POOL_SIZES = 2
POOL_MAX_MB = 4096
# The pool refills this long after a disk was taken: not while the create that took it is
# still running (its crun run would share the CPU with the refill).
REFILL_DELAY_S = 0.2
REFILL_WAIT_MAX_S = 2.0
EXT4_IOC_SHUTDOWN = 0x8004587D
EXT4_GOING_FLAGS_NOLOGFLUSH = 2
SEEK_DATA, SEEK_HOLE = 3, 4


@dataclass(frozen=True)
class UpperDisk:
    """A sandbox's disk: what sandbox.json / vm.json record of it."""

    image: str
    size_mb: int  # the quota: free space of the empty filesystem (>= disk_mb, within TOLERANCE)
    image_bytes: int  # the image file's size (the quota + ext4's own metadata)

    def to_json(self) -> dict[str, str | int]:
        return {"image": self.image, "size_mb": self.size_mb, "image_bytes": self.image_bytes}

    @classmethod
    def from_json(cls, data: dict) -> "UpperDisk":
        return cls(image=str(data["image"]), size_mb=int(data["size_mb"]), image_bytes=int(data["image_bytes"]))


class UpperDisks:
    """Makes sandbox disks on this node. ``directory`` holds the per-size templates; images
    go wherever the caller says (inside the sandbox's own directory, so removing that
    directory removes the disk)."""

    def __init__(self, directory: str, *, preallocate: bool = True, mkfs: str = "mkfs.ext4", pool: int = 0,
                 keep_free_bytes: int = 0):
        self.templates = os.path.join(directory, "templates")
        self.preallocate = preallocate
        # A preallocated image never takes the host's free space below this (the hard watermark).
        self.keep_free_bytes = keep_free_bytes
        self.mkfs = mkfs
        self._formatting = threading.Lock()  # one template at a time (the pool's thread makes disks too)
        self.pool = _Pool(os.path.join(directory, "pool"), self, pool) if pool > 0 else None

    # ---- images ---------------------------------------------------------------------------

    def make(self, image: str, quota: DiskQuota) -> UpperDisk:
        """Create ``image``: an empty ext4 filesystem with quota.size_mb MiB free. Raises
        Unavailable when the host cannot hold it (the image is removed then)."""
        template = self._template(quota.size_mb)
        self.copy(template, image, what=f"a {quota.size_mb} MiB sandbox disk")
        return UpperDisk(image=image, size_mb=quota.size_mb, image_bytes=os.path.getsize(image))

    def copy(self, src: str, image: str, *, what: str = "a sandbox disk") -> None:
        """A new disk image with src's contents (a template, a VM snapshot's disk), sparse,
        then preallocated. Unavailable when the host has no room (nothing is left then)."""
        size = os.path.getsize(src)
        try:
            _sparse_copy(src, image, size)
            if self.preallocate:
                st = os.statvfs(image)
                if st.f_bavail * st.f_frsize - size < self.keep_free_bytes:
                    raise OSError(errno.ENOSPC, "below the hard watermark", image)
                fd = os.open(image, os.O_RDWR | os.O_CLOEXEC)
                try:
                    files.fallocate(fd, size)
                except OSError as exc:
                    if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    log.warning("disk.not_preallocated", image=image, error=str(exc))
                finally:
                    os.close(fd)
        except OSError as exc:
            _unlink(image)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise Unavailable(f"this node's disk is full: no room for {what}") from None
            raise

    def mount(self, image: str, target: str, quota: DiskQuota) -> UpperDisk:
        """A disk of the quota's size at ``image``, mounted at target (an existing directory)
        through a loop device that clears itself once the filesystem is unmounted everywhere:
        one kept ready by the pool when there is one (moved into place), else made now."""
        if self.pool is not None:
            ready = self.pool.take(quota.size_mb, image, target)
            if ready is not None:
                return ready
        disk = self.make(image, quota)
        try:
            _attach_and_mount(image, target)
        except BaseException:
            _unlink(image)
            raise
        return disk

    def open_ready(self) -> list[OpenDisk]:
        """The pool's ready disks (disks/pressure.py): held back like the sandboxes' own, so a
        sandbox that takes one starts with its part of the host's room, not all of its disk."""
        return self.pool.open_ready() if self.pool is not None else []

    def ready_bytes(self) -> int:
        """The pool's ready disks' sizes."""
        return self.pool.ready_bytes() if self.pool is not None else 0

    def close(self) -> None:
        """Stop keeping disks ready and remove the ready ones."""
        if self.pool is not None:
            self.pool.close()

    @staticmethod
    def discard(target: str | int, image: str) -> None:
        """Before unmounting a sandbox's disk for good: shut its filesystem down, so that
        unmounting does not first write back what the sandbox left in the page cache (the
        image is deleted next). Only ever the filesystem mounted at target (a path, or a
        descriptor of its root) from image's loop device: anything else there (nothing
        mounted, an older agent's tmpfs) is left alone.
        compat(4099bcd, 2026-12-01): the tmpfs case is gone 7 days (the longest timeout_s) after
        every node runs 4099bcd or later (no container with a tmpfs upper can still run)."""
        try:
            fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC) \
                if isinstance(target, str) else os.dup(target)
        except OSError:
            return
        try:
            dev = os.fstat(fd).st_dev
            if os.major(dev) != loopdev.LOOP_MAJOR:
                return
            backing = loopdev.backing_file(f"/dev/loop{os.minor(dev)}")
            if backing is None or backing.removesuffix(" (deleted)") != os.path.abspath(image):
                return
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, bytearray(EXT4_GOING_FLAGS_NOLOGFLUSH.to_bytes(4, "little")))
        except OSError as exc:
            log.warning("disk.discard_failed", target=str(target), error=str(exc))
        finally:
            os.close(fd)

    # ---- templates ------------------------------------------------------------------------

    def _template(self, size_mb: int) -> str:
        """The empty filesystem for a quota of size_mb, formatted once per size: the image
        size is adjusted until its free space is size_mb (ext4 keeps inode tables, bitmaps
        and a reserve for delayed allocation out of it)."""
        path = os.path.join(self.templates, f"{size_mb}.img")
        try:
            os.utime(path)  # most recently used
            return path
        except FileNotFoundError:
            pass
        with self._formatting:
            if os.path.exists(path):
                return path
            return self._format_template(path, size_mb)

    def _format_template(self, path: str, size_mb: int) -> str:
        os.makedirs(self.templates, mode=0o700, exist_ok=True)
        want = size_mb * MIB
        image_bytes = _round_up(want + want // 20 + 2 * MIB, MIB)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"  # the VM backend's UpperDisks shares the directory
        started = time.monotonic()
        try:
            for _ in range(6):
                self._format(tmp, image_bytes)
                free = self._free_bytes(tmp)
                if want <= free <= want + TOLERANCE:
                    break
                image_bytes += _round_up(want - free, MIB) if free < want else -((free - want) // MIB) * MIB
            if free < want:
                raise RuntimeFailure(f"cannot format a {size_mb} MiB sandbox disk ({free} bytes free)")
            os.rename(tmp, path)
        finally:
            _unlink(tmp)
        log.debug("disk.template_made", size_mb=size_mb, image_bytes=image_bytes,
                  ms=round((time.monotonic() - started) * 1000, 1))
        self._prune()
        return path

    def _format(self, image: str, size: int) -> None:
        _unlink(image)
        fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
        for extended in (MKFS_EXTENDED, MKFS_EXTENDED_OLD):
            try:
                proc = subprocess.run([self.mkfs, *MKFS_ARGS, "-E", extended, image], capture_output=True, text=True,
                                      check=False)
            except FileNotFoundError:
                raise RuntimeFailure(f"{self.mkfs} not found (e2fsprogs, see APT_PACKAGES in the Makefile)") from None
            if proc.returncode == 0:
                return
        raise RuntimeFailure(f"{self.mkfs} failed: {proc.stderr.strip()[-500:]}")

    def _free_bytes(self, image: str) -> int:
        """What a sandbox may write into a fresh copy of image (mounted read-only once)."""
        probe = f"{image}.mnt"
        os.makedirs(probe, exist_ok=True)
        try:
            device, fd = loopdev.attach(image, direct_io=False)
            try:
                mounts.mount_ext4(device, probe, MOUNT_OPTIONS, readonly=True)
            finally:
                os.close(fd)
            try:
                st = os.statvfs(probe)
                return st.f_bavail * st.f_frsize
            finally:
                mounts.umount(probe)
        finally:
            os.rmdir(probe)

    def _prune(self) -> None:
        """Keep the TEMPLATES_KEPT most recently used templates."""
        try:
            names = [n for n in os.listdir(self.templates) if n.endswith(".img")]
        except FileNotFoundError:
            return
        if len(names) <= TEMPLATES_KEPT:
            return
        paths = sorted((os.path.join(self.templates, n) for n in names), key=os.path.getmtime)
        for path in paths[:-TEMPLATES_KEPT]:
            _unlink(path)


class _Pool:
    """Disks kept ready, mounted under ``directory`` (one ``<n>.img`` + ``<n>/`` each), for
    the POOL_SIZES sizes most recently asked for, ``per_size`` of each; a thread of its own
    refills them. Ready disks are an agent run's own: a new run starts by removing them."""

    def __init__(self, directory: str, disks: UpperDisks, per_size: int):
        self.directory = directory
        self.disks = disks
        self.per_size = per_size
        self._ready: OrderedDict[int, list[UpperDisk]] = OrderedDict()  # size_mb -> ready disks, LRU first
        self._lock = threading.Lock()
        self._wanted: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._serial = 0
        self._closed = False
        # A previous run's ready disks were mounted in its own (gone) mount namespace.
        shutil.rmtree(directory, ignore_errors=True)

    def take(self, size_mb: int, image: str, target: str) -> UpperDisk | None:
        """Move a ready disk of size_mb to image/target; None when there is none (the pool
        then starts keeping this size ready, for the next sandboxes)."""
        if size_mb > POOL_MAX_MB or self._closed:
            return None
        with self._lock:
            ready = self._ready.pop(size_mb, None)
            disk = ready.pop() if ready else None
            self._ready[size_mb] = ready or []  # most recently used
            dropped = [s for s in list(self._ready)[:-POOL_SIZES]]
            stale = [d for s in dropped for d in self._ready.pop(s)]
        self._start()
        self._wanted.put(size_mb)
        for old in stale:
            self._remove(old)
        if disk is None:
            return None
        try:
            os.rename(disk.image, image)
            mounts.move_mount(_mountpoint(disk), target)
        except OSError as exc:  # image in another filesystem than the pool (EXDEV): not reusable
            log.warning("disk.pool_take_failed", error=str(exc))
            if os.path.exists(image):
                os.rename(image, disk.image)
            self._remove(disk)
            return None
        return UpperDisk(image=image, size_mb=disk.size_mb, image_bytes=disk.image_bytes)

    def ready_bytes(self) -> int:
        with self._lock:
            return sum(d.size_mb for disks in self._ready.values() for d in disks) * MIB

    def open_ready(self) -> list[OpenDisk]:
        with self._lock:
            ready = [d for disks in self._ready.values() for d in disks]
        out = []
        for disk in ready:
            try:
                out.append(OpenDisk(os.open(_mountpoint(disk), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), disk.image))
            except OSError:  # taken or removed meanwhile
                continue
        return out

    def close(self) -> None:
        self._closed = True
        if self._thread is not None:
            self._wanted.put(None)
            self._thread.join()
        with self._lock:
            ready = [d for disks in self._ready.values() for d in disks]
            self._ready.clear()
        for disk in ready:
            self._remove(disk)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._refill, name="disk-pool", daemon=True)
            self._thread.start()

    def _refill(self) -> None:
        while (first := self._wanted.get()) is not None:
            # Wait for a quiet moment (REFILL_DELAY_S without a take, at most REFILL_WAIT_MAX_S).
            wanted, deadline = {first}, time.monotonic() + REFILL_WAIT_MAX_S
            while (left := deadline - time.monotonic()) > 0:
                try:
                    size_mb = self._wanted.get(timeout=min(REFILL_DELAY_S, left))
                except queue.Empty:
                    break
                if size_mb is None:
                    return
                wanted.add(size_mb)
            for size_mb in wanted:
                self._fill(size_mb)

    def _fill(self, size_mb: int) -> None:
        while not self._closed:
            with self._lock:
                ready = self._ready.get(size_mb)
                if ready is None or len(ready) >= self.per_size:
                    return
                self._serial += 1
                serial = self._serial
            try:
                disk = self._make(size_mb, serial)
            except Exception as exc:  # noqa: BLE001 - a failed refill only means the next create makes its own disk
                log.warning("disk.pool_refill_failed", size_mb=size_mb, error=str(exc))
                return
            with self._lock:
                ready = self._ready.get(size_mb)
                if ready is not None and not self._closed:
                    ready.append(disk)
                    continue
            self._remove(disk)  # the size was dropped (or the pool closed) meanwhile
            return

    def _make(self, size_mb: int, serial: int) -> UpperDisk:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        image = os.path.join(self.directory, f"{serial}.img")
        disk = self.disks.make(image, DiskQuota(size_mb * MIB))
        os.mkdir(_mountpoint(disk), 0o700)
        try:
            _attach_and_mount(image, _mountpoint(disk))
        except BaseException:
            self._remove(disk)
            raise
        return disk

    @staticmethod
    def _remove(disk: UpperDisk) -> None:
        mountpoint = _mountpoint(disk)
        UpperDisks.discard(mountpoint, disk.image)
        try:
            mounts.umount(mountpoint)
            os.rmdir(mountpoint)
        except OSError:
            pass
        _unlink(disk.image)


def _mountpoint(disk: UpperDisk) -> str:
    return disk.image.removesuffix(".img")


def _attach_and_mount(image: str, target: str) -> None:
    device, fd = loopdev.attach(image)
    try:
        # Device nodes open: the sandbox's /dev lives here (backends/container/bundle.py). A
        # sandbox cannot make device nodes (no CAP_MKNOD; the devices cgroup allows only its
        # own few), and its overlay root, which covers this disk's upper/, never was nodev.
        mounts.mount_ext4(device, target, MOUNT_OPTIONS, devices=True)
    finally:
        os.close(fd)


def _round_up(value: int, align: int) -> int:
    return -(-value // align) * align


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _sparse_copy(src: str, dst: str, size: int) -> None:
    """Copy src's data extents into a new file of ``size`` bytes (holes stay holes)."""
    sfd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        dfd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(dfd, size)
            offset = 0
            while offset < size:
                try:
                    offset = os.lseek(sfd, offset, SEEK_DATA)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:
                        break  # only holes after offset
                    raise
                end = os.lseek(sfd, offset, SEEK_HOLE)
                while offset < end:
                    copied = os.copy_file_range(sfd, dfd, end - offset, offset, offset)
                    if copied == 0:
                        raise OSError(errno.EIO, "short copy", src)
                    offset += copied
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)


def sparse_copy(src: str, dst: str) -> None:
    """A copy of a disk image that allocates only what src holds (a VM snapshot's disk)."""
    _sparse_copy(src, dst, os.path.getsize(src))

