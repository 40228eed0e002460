"""Debian bookworm (minbase + python3, pip and git), via debootstrap.

debootstrap output is not reproducible (logs, timestamps in dpkg state, ldconfig cache), so
the finished tree is cached under the work dir and reused: re-running the CLI then yields
the same digest and registers idempotently. ``rebuild=True`` starts over (new digest,
so register it under a new version).
"""

import os
import shutil
import subprocess
from pathlib import Path

from corral_image_service.builders.common import ensure_line, sandbox_dirs, write

DEFAULT_MIRROR = "http://deb.debian.org/debian"
_DONE = ".corral-complete"  # next to the rootfs, never inside it
# What a SWE-style task needs to start: run the repository's code, install its dependencies
# (with network egress), and read its history.
PACKAGES = ("python3", "python3-pip", "python3-venv", "git")

# Keep later `apt-get install`s in derived layers as lean as the base.
_NODOC = """path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
"""


def _empty_dir(path: Path) -> None:
    if not path.is_dir():
        return
    for entry in path.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _slim(root: Path) -> None:
    for rel in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info",
                "var/log", "dev", "tmp", "var/tmp"):
        _empty_dir(root / rel)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
    for rel in ("var/cache/debconf/config.dat-old", "var/cache/debconf/templates.dat-old",
                "var/lib/dpkg/status-old", "var/cache/ldconfig/aux-cache"):
        (root / rel).unlink(missing_ok=True)
    # debootstrap copies the build host's resolver config in; the runtime provides its own.
    write(root, "etc/resolv.conf", "")
    write(root, "etc/dpkg/dpkg.cfg.d/01-corral-nodoc", _NODOC)


def _add_user(root: Path) -> None:
    ensure_line(root, "etc/passwd", "user:", "user:x:1000:1000::/home/user:/bin/bash")
    ensure_line(root, "etc/group", "user:", "user:x:1000:")
    # Fixed "last change" day instead of today's, so the tree does not depend on the date.
    ensure_line(root, "etc/shadow", "user:", "user:*:19700:0:99999:7:::", mode=0o640)
    ensure_line(root, "etc/gshadow", "user:", "user:*::", mode=0o640)


def build_debian(out_dir: str | Path, *, suite: str = "bookworm", mirror: str = DEFAULT_MIRROR,
                 rebuild: bool = False, **_: object) -> Path:
    root = Path(out_dir)
    done = root.parent / (root.name + _DONE)
    marker = f"{suite} {mirror} {','.join(PACKAGES)}"
    if root.is_dir() and not rebuild and done.exists() and done.read_text().strip() == marker:
        return root  # a tree from another package list is rebuilt
    if os.geteuid() != 0:
        raise PermissionError("debootstrap needs root")
    partial = root.parent / (root.name + ".partial")
    for p in (partial, root):
        if p.exists():
            shutil.rmtree(p)
    done.unlink(missing_ok=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite, str(partial),
                    mirror], check=True)
    _slim(partial)
    sandbox_dirs(partial)
    _add_user(partial)
    os.replace(partial, root)
    done.write_text(marker + "\n")
    return root
