"""Can this test process run real crun sandboxes? Needs root, crun, mkfs.erofs and a static busybox.

If it can, the private mount namespace the node-agent runs in is entered here, once per
process: unshare(CLONE_NEWNS) only works while the process is single-threaded, so the
conftests that need it call ``container_skip_reason()`` at import time (before any fixture
or plugin starts a thread).
"""

import functools
import os
import shutil


@functools.cache
def container_skip_reason() -> str:
    """Why real-crun tests must skip here; "" when they can run (and the namespace is entered)."""
    if os.geteuid() != 0:
        return "container integration tests need root"
    missing = [t for t in ("crun", "mkfs.erofs", "busybox") if shutil.which(t) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    from corral_node_agent import host

    try:
        host.enter_private_mount_namespace()
    except OSError as exc:
        return f"cannot enter a private mount namespace: {exc}"
    return ""
