"""The cgroup filesystems this process sees (its mount namespace's /proc/self/mountinfo)."""

from dataclasses import dataclass

MOUNTINFO = "/proc/self/mountinfo"
# Where a hybrid host (systemd's controllers on v1) mounts its empty cgroup2.
CGROUP_UNIFIED = "/sys/fs/cgroup/unified"


@dataclass(frozen=True)
class CgroupMount:
    fstype: str  # "cgroup" (v1, one hierarchy per mount) or "cgroup2" (the unified hierarchy)
    point: str  # where it is mounted
    root: str  # which cgroup of the hierarchy shows at ``point`` ("/" unless bind-mounted from below)
    options: tuple[str, ...]  # super options: a v1 hierarchy's controllers ("memory", "name=systemd", ...)


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal (\040 ...)
    return field.encode().decode("unicode_escape") if "\\" in field else field


def cgroup_mounts(mountinfo: str = MOUNTINFO) -> list[CgroupMount]:
    mounts = []
    with open(mountinfo) as fh:
        for line in fh:
            pre, _, post = line.partition(" - ")
            fstype, _source, opts = post.split()[:3]
            if fstype not in ("cgroup", "cgroup2"):
                continue
            fields = pre.split()
            mounts.append(CgroupMount(fstype, _unescape(fields[4]), _unescape(fields[3]), tuple(opts.split(","))))
    return mounts
