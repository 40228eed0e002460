"""Syscall filters: one named profile per sandbox kind, one rule list rendered two ways.

- ``container-default``: containers, applied by crun from config.json's ``linux.seccomp``
  (`SyscallFilter.to_oci`, rendered by backends/container/oci.py) to the init and to every
  ``crun exec``;
- ``fncall-default``: every fncall run, a BPF program (`SyscallFilter.to_bpf`) that bwrap
  loads (``--seccomp FD``) and that the zygote's children install themselves;
- VMs have no profile here (`NO_FILTER`): the guest has a kernel of its own, and QEMU runs
  under its own ``-sandbox on`` filter (backends/vm/qemu.py).

Both profiles are allow lists, like Docker's and Podman's defaults: what is not listed fails
with ENOSYS (so a C library falls back as on an older kernel: clone3 -> clone, fchmodat2 ->
fchmodat, and any syscall newer than this list is simply absent). What is refused on purpose
fails with EPERM, as for an unprivileged process: kernel keyrings, bpf, perf, io_uring,
userfaultfd, module loading, kexec, mounts (old and new API), swap, reboot, clock setting,
file handles, NUMA policy, namespaces. Argument filters narrow three calls: ``clone`` without
namespace flags (EPERM with any; ``unshare``/``setns`` are EPERM outright); ``personality``
with the values Docker allows; ``socket``/``socketpair`` for AF_UNIX, AF_INET, AF_INET6 and
AF_NETLINK (route and sock_diag only), any other family EAFNOSUPPORT (AF_VSOCK reaches the
hypervisor, AF_PACKET and the rarely used families are kernel attack surface). Only the
native ABI is allowed: 32-bit (int 0x80) syscalls kill the process. docs/security.md has the
table and the reasons.

The kinds differ in what acts only inside the sandbox: containers may ptrace and
process_vm_read/write their own processes (confined to the sandbox's pid namespace, as
Docker allows on kernels >= 4.8: debuggers, strace) and chroot within their root; a judged
fncall program needs none of it.

BPF: the venv's python has no ``seccomp`` module; Debian's system python3 has it
(python3-seccomp). The generator is a small OCI-seccomp-to-BPF compiler that treats the
JSON exactly as crun 1.8 does (unknown names skipped, rules equal to the default dropped;
with the `LINEAR` layout its program is byte for byte crun's); its output is cached, keyed by
the profile's rendering, the generator and the layout. Containers get it too: crun loads the
precompiled `TREE` program (oci.py) instead of compiling the JSON on every create.
"""

import errno
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# -- the rule list ----------------------------------------------------------------------------

ALLOWED = (
    # processes, threads, scheduling
    "arch_prctl", "execve", "execveat", "exit", "exit_group", "fork", "vfork", "wait4", "waitid",
    "getpid", "getppid", "gettid", "getpgid", "getpgrp", "getsid", "setpgid", "setsid", "getcpu",
    "getpriority", "setpriority", "getrlimit", "setrlimit", "prlimit64", "getrusage", "times", "sysinfo",
    "uname", "prctl", "seccomp", "rseq", "membarrier", "restart_syscall", "set_tid_address",
    "get_robust_list", "set_robust_list", "get_thread_area", "set_thread_area", "map_shadow_stack",
    "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getattr", "sched_setattr",
    "sched_getparam", "sched_setparam", "sched_getscheduler", "sched_setscheduler",
    "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "ioprio_get", "ioprio_set",
    "kill", "tkill", "tgkill", "pidfd_open", "pidfd_send_signal", "process_mrelease",
    "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    # credentials (within the sandbox's own ids; capabilities decide the rest)
    "getuid", "geteuid", "getgid", "getegid", "getgroups", "getresuid", "getresgid", "setuid", "setgid",
    "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups", "capget", "capset",
    # signals
    "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
    "rt_sigtimedwait", "rt_tgsigqueueinfo", "sigaltstack", "signalfd", "signalfd4", "pause",
    # clocks and timers (reading; setting is refused below)
    "clock_getres", "clock_gettime", "clock_nanosleep", "gettimeofday", "time", "nanosleep", "alarm",
    "getitimer", "setitimer", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
    "timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime",
    # memory
    "getrandom", "brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "mincore", "msync", "remap_file_pages",
    "mlock", "mlock2", "mlockall", "munlock", "munlockall", "memfd_create", "pkey_alloc", "pkey_free",
    "pkey_mprotect", "cachestat",
    # files and directories
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
    "open", "openat", "openat2", "creat", "close", "close_range", "lseek", "dup", "dup2", "dup3", "fcntl",
    "flock", "ioctl", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "truncate", "ftruncate",
    "fallocate", "fadvise64", "readahead", "sendfile", "splice", "tee", "vmsplice", "copy_file_range",
    "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat",
    "faccessat2", "getcwd", "chdir", "fchdir", "getdents", "getdents64", "mkdir", "mkdirat", "rmdir",
    "mknod", "mknodat", "link", "linkat", "unlink", "unlinkat", "symlink", "symlinkat", "readlink",
    "readlinkat", "rename", "renameat", "renameat2", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown",
    "fchown", "fchownat", "lchown", "umask", "utime", "utimes", "utimensat", "futimesat",
    "getxattr", "lgetxattr", "fgetxattr", "setxattr", "lsetxattr", "fsetxattr", "listxattr", "llistxattr",
    "flistxattr", "removexattr", "lremovexattr", "fremovexattr",
    "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "fanotify_mark",
    # waiting, events, classic async I/O, System V and POSIX IPC (namespaced)
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
    "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "pipe", "pipe2", "futex", "futex_waitv",
    "futex_wake", "futex_wait", "futex_requeue", "io_setup", "io_destroy", "io_submit", "io_cancel",
    "io_getevents", "io_pgetevents", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
    "mq_getsetattr", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl",
    "shmget", "shmat", "shmdt", "shmctl",
    # sockets once open (socket/socketpair themselves: SOCKET_RULES)
    "accept", "accept4", "bind", "connect", "listen", "shutdown", "getsockname", "getpeername",
    "getsockopt", "setsockopt", "sendto", "sendmsg", "sendmmsg", "recvfrom", "recvmsg", "recvmmsg",
)

# Refused with EPERM by every profile, grouped by why.
DENIED = (
    # kernel keyrings are per host uid, not per sandbox: a key added in one sandbox is visible in others
    "add_key", "request_key", "keyctl",
    # extending or observing the kernel
    "bpf", "perf_event_open", "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "lookup_dcookie", "syslog",
    # io_uring: a second syscall interface that this filter would not see, and a CVE source
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # memory tricks behind many kernel exploits (userfaultfd) or needing CAP_SYS_NICE (NUMA placement)
    "userfaultfd", "mbind", "set_mempolicy", "get_mempolicy", "set_mempolicy_home_node", "migrate_pages",
    "move_pages", "memfd_secret", "process_madvise",
    # file handles bypass path checks (open_by_handle_at: the "shocker" escape)
    "name_to_handle_at", "open_by_handle_at",
    # mounts, old and new API; swap, quotas, accounting, fanotify listeners
    "mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "mount_setattr", "swapon", "swapoff", "quotactl", "quotactl_fd", "acct", "fanotify_init",
    # namespaces: no nested user namespaces (their root gets capabilities), no joining others
    "unshare", "setns",
    # the host: power, names, clocks, I/O ports, LDT (16-bit code), hang-up of terminals
    "reboot", "sethostname", "setdomainname", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "iopl", "ioperm", "modify_ldt", "vhangup",
    # reaching into other processes beyond ptrace
    "kcmp", "pidfd_getfd",
)

# Not listed anywhere, so ENOSYS like any syscall this list does not know: calls that current
# kernels do not implement or that are obsolete (what the kernel itself says for most of them).
OBSOLETE = (
    "_sysctl", "sysfs", "ustat", "uselib", "create_module", "get_kernel_syms", "query_module", "nfsservctl",
    "getpmsg", "putpmsg", "afs_syscall", "tuxcall", "security", "vserver", "epoll_ctl_old", "epoll_wait_old",
)

# Effective only inside the sandbox (its pid namespace, its root): containers allow them,
# fncall refuses them.
SANDBOX_LOCAL = ("ptrace", "process_vm_readv", "process_vm_writev", "chroot")

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
NAMESPACE_FLAGS = (CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET)
# personality(2): PER_LINUX, PER_LINUX32, UNAME26, UNAME26|PER_LINUX32 and the query (Docker's set).
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
SOCKET_FAMILIES = (AF_UNIX, AF_INET, AF_INET6, AF_NETLINK)
# AF_NETLINK protocols below this: NETLINK_ROUTE (0, getaddrinfo/getifaddrs/ip) to
# NETLINK_SOCK_DIAG (4, ss); 1-3 do not exist. Not e.g. KOBJECT_UEVENT (the host's device events).
NETLINK_PROTOCOLS_BELOW = 5


@dataclass(frozen=True)
class Arg:
    """One comparison on a syscall argument, as libseccomp (and the OCI spec) has it:
    ``arg <op> value``, or for MASKED_EQ ``(arg & value) == value_two``. Unsigned, 64 bits."""

    index: int
    op: str  # EQ NE LT LE GE GT MASKED_EQ
    value: int
    value_two: int = 0


@dataclass(frozen=True)
class Rule:
    names: tuple[str, ...]
    errno: int | None = None  # None: allowed; else the call fails with this errno
    args: tuple[Arg, ...] = ()  # all must hold (each on a different argument)


def _eq(index: int, value: int) -> tuple[Arg, ...]:
    return (Arg(index, "EQ", value),)


CLONE_RULES = (
    Rule(("clone",), args=(Arg(0, "MASKED_EQ", sum(NAMESPACE_FLAGS), 0),)),
    *(Rule(("clone",), errno.EPERM, (Arg(0, "MASKED_EQ", flag, flag),)) for flag in NAMESPACE_FLAGS),
    # clone3 takes its flags in a struct a filter cannot read: ENOSYS, so libc falls back to clone.
    Rule(("clone3",), errno.ENOSYS),
)
PERSONALITY_RULES = tuple(Rule(("personality",), args=_eq(0, p)) for p in PERSONALITIES)
_SOCKETS = ("socket", "socketpair")
SOCKET_RULES = (
    *(Rule(_SOCKETS, args=_eq(0, f)) for f in SOCKET_FAMILIES if f != AF_NETLINK),
    Rule(_SOCKETS, args=(*_eq(0, AF_NETLINK), Arg(2, "LT", NETLINK_PROTOCOLS_BELOW))),
    Rule(_SOCKETS, errno.EPROTONOSUPPORT, (*_eq(0, AF_NETLINK), Arg(2, "GE", NETLINK_PROTOCOLS_BELOW))),
    # Every other family (the ones below AF_NETLINK one by one, then all above it).
    *(Rule(_SOCKETS, errno.EAFNOSUPPORT, _eq(0, f)) for f in range(AF_NETLINK) if f not in SOCKET_FAMILIES),
    Rule(_SOCKETS, errno.EAFNOSUPPORT, (Arg(0, "GE", AF_NETLINK + 1),)),
)


# -- profiles ---------------------------------------------------------------------------------

_GENERATOR = r"""
import json, sys, seccomp
OPS = {"SCMP_CMP_" + op: getattr(seccomp, op) for op in ("EQ", "NE", "LT", "LE", "GE", "GT", "MASKED_EQ")}
def action(name, errno):
    return seccomp.ALLOW if name == "SCMP_ACT_ALLOW" else seccomp.ERRNO(errno)
spec = json.load(sys.stdin)
f = seccomp.SyscallFilter(action(spec["defaultAction"], spec.get("defaultErrnoRet", 1)))
f.set_attr(seccomp.Attr.CTL_OPTIMIZE, int(sys.argv[2]))
for rule in spec["syscalls"]:
    act = action(rule["action"], rule.get("errnoRet", 1))
    args = [seccomp.Arg(a["index"], OPS[a["op"]], a["value"], a.get("valueTwo", 0)) for a in rule.get("args", ())]
    for name in rule["names"]:
        if seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) >= 0:  # unknown here: skipped, as crun does
            f.add_rule(act, name, *args)
with open(sys.argv[1], "wb") as fh:
    f.export_bpf(fh)
"""


# libseccomp's SCMP_FLTATR_CTL_OPTIMIZE. Installing a filter makes the kernel run it once per
# syscall number (to cache the calls that are always allowed): ~500 us for the linear layout,
# ~200 us for the tree, per sandboxed process tree (each fncall run, each crun exec).
LINEAR, TREE = 1, 2


def _action(errno_value: int | None) -> dict[str, Any]:
    if errno_value is None:
        return {"action": "SCMP_ACT_ALLOW"}
    return {"action": "SCMP_ACT_ERRNO", "errnoRet": errno_value}


@dataclass(frozen=True)
class SyscallFilter:
    """A named profile: ``rules`` over a default errno for everything not listed (no rules:
    no filter at all)."""

    name: str
    rules: tuple[Rule, ...] = ()
    default_errno: int = errno.ENOSYS

    def to_oci(self) -> dict[str, Any] | None:
        """The OCI runtime spec's ``linux.seccomp`` (None: no filter). Native architecture
        only (no ``architectures``): another ABI's syscalls hit libseccomp's bad-arch action,
        which kills. Rules equal to the default are left out (crun would skip them)."""
        if not self.rules:
            return None
        syscalls = []
        for rule in self.rules:
            if rule.errno == self.default_errno:
                continue
            entry: dict[str, Any] = {"names": list(rule.names), **_action(rule.errno)}
            if rule.args:
                entry["args"] = [{"index": a.index, "value": a.value, "valueTwo": a.value_two, "op": f"SCMP_CMP_{a.op}"}
                                 for a in rule.args]
            syscalls.append(entry)
        return {"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": self.default_errno, "syscalls": syscalls}

    def digest(self, optimize: int = TREE) -> str:
        """Changes whenever the rendered rules (or the BPF generator, or its layout) change."""
        rendered = json.dumps(self.to_oci(), sort_keys=True) + _GENERATOR + str(optimize)
        return hashlib.sha256(rendered.encode()).hexdigest()[:16]

    def to_bpf(self, cache_dir: str | Path, python: str = "/usr/bin/python3", *, optimize: int = TREE) -> Path:
        """The path of the compiled BPF program, generating it on first use. ``optimize``:
        libseccomp's layout, `TREE` (a binary search over syscall numbers) or `LINEAR` (what
        crun makes of the same JSON, byte for byte)."""
        spec = self.to_oci()
        if spec is None:
            raise ValueError(f"syscall profile {self.name!r} has no rules: there is no program to load")
        path = Path(cache_dir) / f"{self.name}-{self.digest(optimize)}.bpf"
        if path.exists() and path.stat().st_size > 0:
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        # Per process: two node-agents filling an empty cache at once must not share a tmp file.
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run([python, "-c", _GENERATOR, str(tmp), str(optimize)], input=json.dumps(spec).encode(),
                       check=True, capture_output=True)
        tmp.replace(path)
        return path


def _profile(name: str, *, allowed: tuple[str, ...], denied: tuple[str, ...]) -> SyscallFilter:
    return SyscallFilter(name, (Rule(allowed), Rule(denied, errno.EPERM), *CLONE_RULES, *PERSONALITY_RULES,
                                *SOCKET_RULES))


NO_FILTER = SyscallFilter("none")
CONTAINER_DEFAULT = _profile("container-default", allowed=ALLOWED + SANDBOX_LOCAL, denied=DENIED)
FNCALL_DEFAULT = _profile("fncall-default", allowed=ALLOWED, denied=DENIED + SANDBOX_LOCAL)
PROFILES = {p.name: p for p in (CONTAINER_DEFAULT, FNCALL_DEFAULT)}
