"""Host-level primitives: the agent's private mount namespace and mount(2) via ctypes.

The `mount` binary is avoided on purpose: for a file source it silently sets up a loop
device, while the kernel mounts EROFS straight from a file in well under a millisecond.
"""

import ctypes
import ctypes.util
import errno
import os
import shutil

CLONE_NEWNS = 0x00020000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_MOVE = 8192
MS_BIND = 4096
MS_REC = 16384
MS_SLAVE = 1 << 19
MNT_DETACH = 2

CGROUP_UNIFIED = "/sys/fs/cgroup/unified"

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_original_namespace: int | None = None
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def _raise(path: str, what: str) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"{what}: {os.strerror(err)}", path)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    rc = _libc.mount(
        source.encode() if source is not None else None,
        target.encode(),
        fstype.encode() if fstype is not None else None,
        flags,
        data.encode() if data is not None else None,
    )
    if rc != 0:
        _raise(target, f"mount {fstype or ''} {source or ''}".strip())


def mountpoints() -> list[str]:
    """Mount points visible to this process (its own mount namespace)."""
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            # Field 5 is the mount point, with spaces etc. escaped as octal.
            raw = line.split()[4]
            points.append(raw.encode().decode("unicode_escape"))
    return points


def is_mountpoint(path: str) -> bool:
    return os.path.abspath(path) in mountpoints()


# Descriptors the agent holds per running container: its detached disk and root, and its init's
# pidfd (tests/integration/node_agent/test_node_container.py counts them). The density run of
# 2026-12-03 found 5 (the memory sampler kept two counter files open per sandbox: now opened per
# read, cgroups/files.py).
FDS_PER_SANDBOX = 3
# Descriptors the agent needs besides its sandboxes' (sockets, logs, execs in flight, fncall);
# a quarter of a small limit.
FDS_RESERVED = 4096
# How far a root agent raises its hard limit (the kernel's fs.nr_open bounds it too).
OPEN_FILES_TARGET = 1 << 20


def raise_open_files_limit() -> int:
    """RLIMIT_NOFILE up as far as this process may; returns the new soft limit. The agent
    keeps FDS_PER_SANDBOX descriptors per sandbox: a soft limit of 1024 (systemd's default)
    would end a node at a few hundred, and a shell's hard limit (20,000 on these machines)
    ended the density run at 4,009 per node with EMFILE on every start after. As root
    (CAP_SYS_RESOURCE) the hard limit goes up to fs.nr_open too; otherwise soft = hard."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        candidates = [(max(soft, OPEN_FILES_TARGET), hard)]
    else:
        try:
            with open("/proc/sys/fs/nr_open") as fh:
                ceiling = int(fh.read())
        except (OSError, ValueError):
            ceiling = hard
        raised = max(hard, min(OPEN_FILES_TARGET, ceiling))
        candidates = [(raised, raised), (hard, hard)]  # the first needs CAP_SYS_RESOURCE
    for new_soft, new_hard in candidates:
        if new_soft <= soft:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, new_hard))
            return new_soft
        except (ValueError, OSError):
            continue
    return soft


def sandboxes_open_files_allow() -> int:
    """How many sandboxes this process's RLIMIT_NOFILE leaves room for."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    return max(1, (soft - min(FDS_RESERVED, soft // 4)) // FDS_PER_SANDBOX)


def enter_private_mount_namespace() -> None:
    """Give this process its own mount namespace, shaped the way crun needs it.

    Must run while the process is single-threaded (unshare(CLONE_NEWNS) fails with EINVAL
    otherwise): call it first thing in main, or at test-session import time.

    - rslave: host mounts still propagate in, but our sandbox/layer mounts never leak out,
      and they all vanish with the process (no stale mounts on the host after a crash).
    - crun 1.8 refuses the hybrid cgroup layout; hiding the cgroup2 mount at
      /sys/fs/cgroup/unified makes it a plain v1 host for crun.
    """
    global _original_namespace
    if _original_namespace is None:
        # Kept for the processes that must outlive us without pinning our namespace (the
        # lazy-layer server: ``layers.lazy.server``).
        _original_namespace = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    private_mount_namespace()
    if is_mountpoint(CGROUP_UNIFIED):
        umount(CGROUP_UNIFIED, lazy=True)


def private_mount_namespace(parent_fd: int | None = None) -> None:
    """Move this (single-threaded) process into a new mount namespace, rslave: copied from
    the namespace ``parent_fd`` names (else from the current one)."""
    if parent_fd is not None and _libc.setns(parent_fd, CLONE_NEWNS) != 0:
        _raise("/", "setns(CLONE_NEWNS)")
    if _libc.unshare(CLONE_NEWNS) != 0:
        _raise("/", "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_SLAVE, None)


def original_mount_namespace() -> int | None:
    """A descriptor of the mount namespace this process started in, before
    ``enter_private_mount_namespace`` (None: it never left it)."""
    return _original_namespace


def mount_erofs(image: str, target: str) -> None:
    """EROFS straight from the file ``image``, named to the kernel by a descriptor: the source
    a mount shows in /proc/self/mountinfo is the string it was given, and a sandbox that sees
    this mount (fncall binds a layer as its root) must not read the node's paths there
    (``/proc/self/fd/N`` instead). O_PATH: nothing is opened twice (a FUSE file's server sees
    the kernel's one open)."""
    fd = os.open(image, os.O_PATH | os.O_CLOEXEC)
    try:
        _mount(f"/proc/self/fd/{fd}", os.path.abspath(target), "erofs", MS_RDONLY, None)
    finally:
        os.close(fd)


def mount_overlay(lowers: list[str], upper: str, work: str, target: str) -> None:
    """Overlay with `lowers` top-first (toolkit, workspace, base)."""
    if not lowers:
        raise OSError(errno.EINVAL, "overlay needs at least one lower dir", target)
    for p in [*lowers, upper, work]:
        if any(c in p for c in ",:\n"):
            # The option string has no escaping for these; refuse instead of mis-parsing.
            raise OSError(errno.EINVAL, "unsupported character in overlay path", p)
    opts = "lowerdir={},upperdir={},workdir={}".format(
        ":".join(os.path.abspath(p) for p in lowers), os.path.abspath(upper), os.path.abspath(work)
    )
    _mount("overlay", os.path.abspath(target), "overlay", 0, opts)


def move_mount(source: str, target: str) -> None:
    """Move the mount at source (with everything under it) to target."""
    _mount(os.path.abspath(source), os.path.abspath(target), None, MS_MOVE, None)


def bind_mount(source: str, target: str) -> None:
    """Make source's tree also appear at target (same filesystem, same mount flags)."""
    _mount(source, target, None, MS_BIND, None)


def mount_tmpfs(target: str, size_mb: int, mode: int = 0o755) -> None:
    _mount("tmpfs", os.path.abspath(target), "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(size_mb)}m,mode={mode:o}")


def mount_empty_readonly(target: str) -> None:
    """A read-only tmpfs with nothing in it (and room for nothing)."""
    _mount("tmpfs", os.path.abspath(target), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555")


def mount_copy_readonly(source: str, target: str, name: str) -> str:
    """A read-only tmpfs at ``target`` holding a copy of the file ``source`` (its mode kept) as
    ``name``, sized to it; returns the copy's path. Bound elsewhere, the copy shows in
    /proc/self/mountinfo as ``/<name>`` of a tmpfs, where a bind of ``source`` itself would
    show its path on the host."""
    size_kb = os.stat(source).st_size // 1024 + 64
    _mount("tmpfs", os.path.abspath(target), "tmpfs", MS_NOSUID | MS_NODEV, f"size={size_kb}k,mode=555")
    copy = f"{target}/{name}"
    shutil.copy(source, copy)
    _mount(None, os.path.abspath(target), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    return copy


def mount_sysfs(target: str) -> None:
    """Read-only sysfs as the calling thread sees it (its network namespace's devices)."""
    _mount("sysfs", os.path.abspath(target), "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None)


def mount_ext4(device: str, target: str, options: str = "", *, readonly: bool = False, devices: bool = False) -> None:
    """An ext4 filesystem on a block device (a sandbox's disk on its loop device), nosuid,
    and nodev unless ``devices`` (device nodes on it open)."""
    flags = MS_NOSUID | (0 if devices else MS_NODEV) | (MS_RDONLY if readonly else 0)
    _mount(device, os.path.abspath(target), "ext4", flags, options or None)


def fallocate(fd: int, length: int) -> None:
    """Reserve length bytes for the file (fallocate(2) mode 0: unwritten extents, reading as
    zeros). Unlike posix_fallocate it never falls back to writing zeros: EOPNOTSUPP instead."""
    if _libc.fallocate(fd, 0, ctypes.c_int64(0), ctypes.c_int64(length)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fallocate: {os.strerror(err)}")


def umount(target: str, lazy: bool = True) -> bool:
    """Unmount; returns False when nothing was mounted there.

    With lazy=True a busy mount (EBUSY: e.g. a process still has a cwd in it) is detached
    instead, so cleanup never leaves a mount behind in our namespace.
    """
    path = os.path.abspath(target).encode()
    if _libc.umount2(path, 0) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOENT):
        return False
    if err == errno.EBUSY and lazy:
        if _libc.umount2(path, MNT_DETACH) == 0:
            return True
        err = ctypes.get_errno()
    raise OSError(err, f"umount: {os.strerror(err)}", target)


def detach(target: str) -> None:
    """Detach the mount at target from this namespace at once (MNT_DETACH): what still uses
    it (an open descriptor, another namespace's copy) keeps it alive, nothing new finds it."""
    if _libc.umount2(os.path.abspath(target).encode(), MNT_DETACH) != 0:
        _raise(target, "umount2(MNT_DETACH)")


def umount_tree(root: str) -> None:
    """Unmount everything at or below root, deepest first."""
    root = os.path.abspath(root)
    below = [m for m in mountpoints() if m == root or m.startswith(root + "/")]
    for m in sorted(set(below), key=len, reverse=True):
        while umount(m):
            # Stacked mounts on the same point: peel them all.
            pass
