"""How many sandboxes this process's open-files limit leaves room for, and raising it."""

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
