import os
from pathlib import Path

USER_UID = 1000
USER_GID = 1000
HOSTNAME = "corral"


def _chown(path: Path, uid: int, gid: int) -> None:
    # Unprivileged builds cannot chown; the tree is still usable for local experiments.
    if os.geteuid() == 0:
        os.lchown(path, uid, gid)


def mkdir(root: Path, rel: str, mode: int, uid: int = 0, gid: int = 0) -> Path:
    p = root / rel
    p.mkdir(parents=True, exist_ok=True)
    _chown(p, uid, gid)
    # chmod after chown: chown clears setuid/setgid, and mkdir's mode is masked by umask.
    os.chmod(p, mode)
    return p


def write(root: Path, rel: str, content: str, mode: int = 0o644) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(content)
    os.chmod(p, mode)


def ensure_line(root: Path, rel: str, prefix: str, line: str, mode: int = 0o644) -> None:
    """Add ``line`` unless an entry starting with ``prefix`` exists (so rebuilds are no-ops)."""
    p = root / rel
    existing = p.read_text().splitlines() if p.exists() else []
    if not any(entry.startswith(prefix) for entry in existing):
        p.write_text("\n".join([*existing, line]) + "\n")
    os.chmod(p, mode)


def sandbox_dirs(root: Path) -> None:
    """Directories every Corral sandbox expects, with the modes the runtime relies on."""
    os.chmod(root, 0o755)  # noqa: S103 - the sandbox's "/", readable by its non-root user
    mkdir(root, "tmp", 0o1777)
    mkdir(root, "root", 0o700)
    mkdir(root, "home", 0o755)
    mkdir(root, "home/user", 0o755, USER_UID, USER_GID)
    # Mount points only: the runtime mounts proc, sysfs and a /dev of its own.
    for d in ("proc", "sys", "dev"):
        mkdir(root, d, 0o755)
    write(root, "etc/hostname", HOSTNAME + "\n")
