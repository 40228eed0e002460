"""Loop block devices, set up with ioctls (no `losetup` process).

``attach`` binds an image file to a free /dev/loopN with LOOP_CONFIGURE (one ioctl, Linux
5.8+), auto-clearing: the device lets go of its file by itself once nothing holds it (the
filesystem mounted from it is unmounted in every mount namespace). With direct I/O the file's
pages are not cached a second time under the filesystem's own.
"""

import errno
import fcntl
import os
import stat
import struct

LOOP_MAJOR = 7
LOOP_CTL_GET_FREE = 0x4C82
LOOP_CONFIGURE = 0x4C0A
LO_FLAGS_AUTOCLEAR = 4
LO_FLAGS_DIRECT_IO = 16
# struct loop_config: u32 fd, u32 block_size, struct loop_info64 (232 bytes), u64 reserved[8].
_CONFIG_SIZE = 304
_FLAGS_OFFSET = 8 + 52  # loop_info64.lo_flags
_ATTEMPTS = 64  # another process may take the free device between GET_FREE and CONFIGURE


def attach(image: str, *, direct_io: bool = True) -> tuple[str, int]:
    """Bind image to a free loop device; returns (device path, open fd of the device). Close
    the fd once the device is in use (mounted): it clears itself when that use ends."""
    ctl = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
        try:
            for _ in range(_ATTEMPTS):
                number = fcntl.ioctl(ctl, LOOP_CTL_GET_FREE)
                device = _device_node(number)
                fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
                try:
                    _configure(fd, backing, direct_io)
                except OSError as exc:
                    os.close(fd)
                    if exc.errno == errno.EBUSY:
                        continue  # lost the race for this one
                    raise
                return device, fd
        finally:
            os.close(backing)
    finally:
        os.close(ctl)
    raise OSError(errno.EBUSY, "no free loop device", image)


def _configure(fd: int, backing: int, direct_io: bool) -> None:
    config = bytearray(_CONFIG_SIZE)
    struct.pack_into("II", config, 0, backing, 0)
    flags = LO_FLAGS_AUTOCLEAR | (LO_FLAGS_DIRECT_IO if direct_io else 0)
    struct.pack_into("I", config, _FLAGS_OFFSET, flags)
    try:
        fcntl.ioctl(fd, LOOP_CONFIGURE, config)
    except OSError as exc:
        if direct_io and exc.errno == errno.EINVAL:
            # The backing filesystem cannot do direct I/O: cached I/O then.
            _configure(fd, backing, direct_io=False)
            return
        raise


def _device_node(number: int) -> str:
    """/dev/loopN, made when /dev has no node for it (a /dev without devtmpfs)."""
    device = f"/dev/loop{number}"
    try:
        st = os.stat(device)
        if stat.S_ISBLK(st.st_mode):
            return device
        raise OSError(errno.ENOTBLK, "not a block device", device)
    except FileNotFoundError:
        try:
            os.mknod(device, 0o660 | stat.S_IFBLK, os.makedev(LOOP_MAJOR, number))
        except FileExistsError:
            pass
        return device


def backing_file(device: str) -> str | None:
    """The file a loop device is bound to ("... (deleted)" once unlinked), None when unbound."""
    name = os.path.basename(device)
    try:
        with open(f"/sys/block/{name}/loop/backing_file") as fh:
            return fh.read().strip()
    except OSError:
        return None


def devices_backed_by(image: str) -> list[str]:
    """Loop devices still bound to image (or to it after it was unlinked)."""
    image = os.path.abspath(image)
    found = []
    for name in os.listdir("/sys/block"):
        if not name.startswith("loop"):
            continue
        path = backing_file(f"/dev/{name}")
        if path is not None and path.removesuffix(" (deleted)") == image:
            found.append(f"/dev/{name}")
    return found
