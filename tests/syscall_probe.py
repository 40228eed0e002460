"""Probing the syscall profiles from inside a sandbox: a table of calls with the errno each
profile must give, a static C probe (containers: busybox has no interpreter; the host-root
test) and the same probe in python (fncall's zygote runs python only).

Every call uses arguments that are invalid or harmless, so that without the filter the kernel
answers with something else (mostly EFAULT/EINVAL/EBADF, or success) even as root, and
nothing happens if a filter let one through. ``ERRNO`` 0 means: the call succeeded.
"""

import errno
import shutil
import subprocess
from pathlib import Path

PROBE_C = Path(__file__).with_name("syscall_probe.c")
EPERM, ENOSYS, EAFNOSUPPORT, EPROTONOSUPPORT = errno.EPERM, errno.ENOSYS, errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT
CLONE_SIGHAND = 0x800  # without CLONE_VM: EINVAL, so no clone below can create a process
NS_FLAGS = {"newns": 0x20000, "newcgroup": 0x2000000, "newuts": 0x4000000, "newipc": 0x8000000,
            "newuser": 0x10000000, "newpid": 0x20000000, "newnet": 0x40000000}
AF_INET, AF_INET6, AF_UNIX, AF_NETLINK, AF_PACKET, AF_ALG, AF_VSOCK = 2, 10, 1, 16, 17, 38, 40
SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET = 1, 2, 3, 5
NETLINK_ROUTE, NETLINK_SOCK_DIAG, NETLINK_KOBJECT_UEVENT = 0, 4, 15

# (label, syscall name or number, args, errno in a container, errno in fncall)
BLOCKED_EVERYWHERE = [(name, name, args) for name, args in [
    ("add_key", (0, 0, 0, 0, 0)), ("request_key", (0, 0, 0, 0)), ("keyctl", (-1,)),
    ("bpf", (-1, 0, 0)), ("perf_event_open", (0, 0, -1, -1, 0)), ("init_module", (0, 0, 0)),
    ("finit_module", (-1, 0, 0)), ("delete_module", (0, 0)), ("kexec_load", (0, 0, 0, -1)),
    ("kexec_file_load", (-1, -1, 0, 0, -1)), ("syslog", (-1, 0, 0)),
    ("io_uring_setup", (0, 0)), ("io_uring_enter", (-1, 0, 0, 0, 0, 0)), ("io_uring_register", (-1, 0, 0, 0)),
    ("userfaultfd", (-1,)), ("mbind", (0, 0, 0, 0, 0, 0)), ("set_mempolicy", (-1, 0, 0)),
    ("get_mempolicy", (0, 0, 0, 0, 0)), ("migrate_pages", (-1, 0, 0, 0)), ("move_pages", (-1, 0, 0, 0, 0, 0)),
    ("memfd_secret", (-1,)), ("process_madvise", (-1, 0, 0, 0, 0)),
    ("name_to_handle_at", (-1, 0, 0, 0, 0)), ("open_by_handle_at", (-1, 0, 0)),
    ("mount", (0, 0, 0, 0, 0)), ("umount2", (0, 0)), ("pivot_root", (0, 0)), ("fsopen", (0, 0)),
    ("fsconfig", (-1, 0, 0, 0, 0)), ("fsmount", (-1, 0, 0)), ("fspick", (-1, 0, -1)),
    ("move_mount", (-1, 0, -1, 0, -1)), ("open_tree", (-1, 0, -1)), ("mount_setattr", (-1, 0, -1, 0, 0)),
    ("swapon", (0, 0)), ("swapoff", (0,)), ("quotactl", (0, 0, 0, 0)), ("quotactl_fd", (-1, 0, 0, 0)),
    ("acct", (1,)), ("fanotify_init", (-1, 0)), ("unshare", (0,)), ("setns", (-1, 0)),
    ("reboot", (0, 0, 0, 0)), ("sethostname", (1, 1)), ("setdomainname", (1, 1)), ("settimeofday", (1, 0)),
    ("clock_settime", (0, 1)), ("clock_adjtime", (0, 1)), ("adjtimex", (1,)), ("iopl", (4,)),
    ("ioperm", (-1, 1, 1)), ("modify_ldt", (-1, 0, 0)), ("vhangup", ()), ("kcmp", (-1, -1, 0, 0, 0)),
    ("pidfd_getfd", (-1, 0, 0)),
]]
CALLS = [
    *((label, name, args, EPERM, EPERM) for label, name, args in BLOCKED_EVERYWHERE),
    # Inside the sandbox only: containers may, fncall may not (the kernel's own answer otherwise).
    ("ptrace", "ptrace", (-1, 0, 0, 0), errno.ESRCH, EPERM),
    ("process_vm_readv", "process_vm_readv", (-1, 0, 0, 0, 0, 0), 0, EPERM),  # no iovecs: nothing read
    ("chroot", "chroot", (1,), errno.EFAULT, EPERM),
    # Namespaces through clone: refused with any namespace flag; clone3 is ENOSYS (libc falls back).
    *((f"clone {n}", "clone", (f | CLONE_SIGHAND, 0, 0, 0, 0), EPERM, EPERM) for n, f in NS_FLAGS.items()),
    ("clone plain", "clone", (CLONE_SIGHAND, 0, 0, 0, 0), errno.EINVAL, errno.EINVAL),
    ("clone3", "clone3", (0, 0), ENOSYS, ENOSYS),
    ("personality query", "personality", (0xFFFFFFFF,), 0, 0),
    ("personality ADDR_NO_RANDOMIZE", "personality", (0x0040000,), ENOSYS, ENOSYS),
    # Sockets: four families (netlink: route and sock_diag only).
    ("socket inet", "socket", (AF_INET, SOCK_STREAM, 0), 0, 0),
    ("socket inet6", "socket", (AF_INET6, SOCK_DGRAM, 0), 0, 0),
    ("socket unix", "socket", (AF_UNIX, SOCK_SEQPACKET, 0), 0, 0),
    ("socket netlink route", "socket", (AF_NETLINK, SOCK_RAW, NETLINK_ROUTE), 0, 0),
    ("socket netlink sock_diag", "socket", (AF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG), 0, 0),
    ("socket netlink uevent", "socket", (AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT),
     EPROTONOSUPPORT, EPROTONOSUPPORT),
    ("socket vsock", "socket", (AF_VSOCK, SOCK_STREAM, 0), EAFNOSUPPORT, EAFNOSUPPORT),
    ("socket packet", "socket", (AF_PACKET, SOCK_RAW, 0), EAFNOSUPPORT, EAFNOSUPPORT),
    ("socket alg", "socket", (AF_ALG, SOCK_SEQPACKET, 0), EAFNOSUPPORT, EAFNOSUPPORT),
    ("socket inet, high bits set", "socket", (0x100000000 | AF_INET, SOCK_STREAM, 0), EAFNOSUPPORT, EAFNOSUPPORT),
    ("socketpair unix", "socketpair", (AF_UNIX, SOCK_STREAM, 0, 0), errno.EFAULT, errno.EFAULT),
    ("socketpair vsock", "socketpair", (AF_VSOCK, SOCK_STREAM, 0, 0), EAFNOSUPPORT, EAFNOSUPPORT),
    # Newer than the profile (mseal, kernel 6.10): absent, as on an older kernel.
    ("mseal", 462, (0, 0, 0), ENOSYS, ENOSYS),
    ("getpid", "getpid", (), 0, 0),
]

PYTHON_PROBE = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
for line in sys.stdin.read().splitlines():
    nr, *args = (int(x, 0) for x in line.split())
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    print(nr, r, ctypes.get_errno() if r == -1 else 0)
"""


def syscall_numbers(names) -> dict[str, int]:
    """Native syscall numbers, from libseccomp's table (Debian's python3-seccomp)."""
    script = "import seccomp, sys\nfor n in sys.argv[1:]: print(seccomp.resolve_syscall(seccomp.Arch.NATIVE, n))"
    out = subprocess.run(["/usr/bin/python3", "-c", script, *names], capture_output=True, text=True, check=True)
    return dict(zip(names, (int(x) for x in out.stdout.split()), strict=True))


def probe_input() -> str:
    """The stdin for either probe: one line per row of CALLS."""
    numbers = syscall_numbers(sorted({name for _, name, *_ in CALLS if isinstance(name, str)}))
    lines = []
    for _, name, args, *_ in CALLS:
        nr = numbers[name] if isinstance(name, str) else name
        lines.append(" ".join(str(x) for x in (nr, *args)))
    return "\n".join(lines) + "\n"


def errnos(output: str) -> dict[str, int]:
    """label -> the errno the probe saw (0: success), from its output."""
    rows = [line.split() for line in output.splitlines() if line and not line.startswith("int80")]
    assert len(rows) == len(CALLS), output
    return {label: int(row[2]) for (label, *_), row in zip(CALLS, rows, strict=True)}


def expected(kind: str) -> dict[str, int]:
    column = 3 if kind == "container" else 4
    return {row[0]: row[column] for row in CALLS}


def build_probe(out_dir: Path) -> Path:
    """The C probe, static (it runs in a busybox container)."""
    gcc = shutil.which("gcc")
    assert gcc, "gcc is in the Makefile's APT_PACKAGES"
    out = out_dir / "syscall-probe"
    subprocess.run([gcc, "-static", "-O2", "-Wall", "-o", str(out), str(PROBE_C)], check=True, capture_output=True)
    return out
