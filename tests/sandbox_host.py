"""Can this test process run real crun sandboxes (root, crun, mkfs.erofs, a static busybox), or
fncall workers (root, bubblewrap, cgroups, python3-seccomp)?

If it can, the private mount namespace the node-agent runs in is entered here, once per
process: unshare(CLONE_NEWNS) only works while the process is single-threaded, so the
conftests that need it call ``container_skip_reason()`` at import time (before any fixture
or plugin starts a thread).
"""

import functools
import os
import shutil
import subprocess
from pathlib import Path


@functools.cache
def container_skip_reason() -> str:
    """Why real-crun tests must skip here; "" when they can run (and the namespace is entered)."""
    if os.geteuid() != 0:
        return "container integration tests need root"
    missing = [t for t in ("crun", "mkfs.erofs", "busybox") if shutil.which(t) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    from corral_host import namespaces

    try:
        namespaces.enter_private_mount_namespace()
    except OSError as exc:
        return f"cannot enter a private mount namespace: {exc}"
    return ""


def fncall_host_problem() -> str:
    """Why fncall workers (bubblewrap, cgroup v1) cannot run here; "" when they can."""
    if os.geteuid() != 0:
        return "fncall workers need root (cgroups, uid switch)"
    if not shutil.which("bwrap"):
        return "bubblewrap is not installed"
    if not all(Path(f"/sys/fs/cgroup/{c}/cgroup.procs").exists() for c in ("memory", "pids", "cpuacct")):
        return "needs cgroup v1 memory, pids and cpuacct"
    if not Path("/usr/bin/python3").exists() or subprocess.run(["/usr/bin/python3", "-c", "import seccomp"],
                                                                capture_output=True).returncode:
        return "needs python3-seccomp for the system python3"
    return ""
