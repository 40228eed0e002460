"""Syscall filters: a deny list, rendered as BPF for bwrap and as an OCI ``linux.seccomp``.

Default allow, with the syscalls a sandboxed program never needs returning EPERM: mounts,
namespaces, ptrace/process_vm_*, kernel keyrings, bpf/perf, module loading, reboot/kexec,
swap, clock/time changes, personality tricks (TIOCSTI is moot: bwrap --new-session).

fncall runs get it (bwrap ``--seccomp FD``, and the zygote's children install the same
program). Containers get no filter yet: `to_oci()` renders the list for crun, and the policy
hands containers the empty filter until the isolation work switches it on.

BPF: the venv's python has no ``seccomp`` module; Debian's system python3 has it
(python3-seccomp). The filter is generated once with ``/usr/bin/python3`` and cached as a
BPF file keyed by the rule set, then opened per run.
"""

import errno
import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DENIED = (
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "ptrace", "process_vm_readv",
    "process_vm_writev", "kexec_load", "kexec_file_load", "reboot", "init_module", "finit_module",
    "delete_module", "bpf", "perf_event_open", "add_key", "request_key", "keyctl", "swapon", "swapoff",
    "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog", "userfaultfd",
    "open_by_handle_at", "name_to_handle_at", "fanotify_init", "lookup_dcookie", "quotactl",
    "fsopen", "fsmount", "fsconfig", "move_mount", "open_tree", "mount_setattr", "iopl", "ioperm",
)

_GENERATOR = r"""
import errno, sys, seccomp
f = seccomp.SyscallFilter(seccomp.ALLOW)
for name in sys.argv[2:]:
    try:
        f.add_rule(seccomp.ERRNO(errno.EPERM), name)
    except Exception:
        pass  # not a syscall on this arch
with open(sys.argv[1], "wb") as fh:
    f.export_bpf(fh)
"""


@dataclass(frozen=True)
class SyscallFilter:
    denied: tuple[str, ...] = ()  # these fail with EPERM, everything else is allowed; () = no filter

    def to_oci(self) -> dict[str, Any] | None:
        """The OCI runtime spec's ``linux.seccomp`` for this filter (None: no filter)."""
        if not self.denied:
            return None
        return {"defaultAction": "SCMP_ACT_ALLOW",
                "syscalls": [{"names": list(self.denied), "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM}]}

    def to_bpf(self, cache_dir: str | Path, python: str = "/usr/bin/python3") -> Path:
        """The path of the compiled BPF program, generating it on first use."""
        digest = hashlib.sha256("\n".join(self.denied).encode()).hexdigest()[:12]
        path = Path(cache_dir) / f"fncall-seccomp-{digest}.bpf"
        if path.exists() and path.stat().st_size > 0:
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        subprocess.run([python, "-c", _GENERATOR, str(tmp), *self.denied], check=True, capture_output=True)
        tmp.replace(path)
        return path


NO_FILTER = SyscallFilter()
DEFAULT_FILTER = SyscallFilter(DENIED)
