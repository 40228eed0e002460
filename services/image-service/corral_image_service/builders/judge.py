"""The fncall ("judge") runtime base: Debian bookworm minbase plus the toolchains of the fncall
runtimes (corral_node_agent.fncall.runtimes), all Debian packages, via debootstrap.

Same recipe and cache contract as ``builders.debian`` (a finished tree is marked complete next
to it and reused; ``rebuild=True`` starts over), with the compilers the online-judge runtimes
need. The completion marker holds ``cache_key()`` (suite, mirror-independent package list): a
tree built from another package list is not complete, so adding a language rebuilds it.
debootstrap takes minutes, so callers keep the tree in a cache dir that outlives test
sessions (``CORRAL_FNCALL_CACHE_DIR``, default ``/var/cache/corral/fncall``).
"""

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from corral_image_service.builders.common import sandbox_dirs
from corral_image_service.builders.debian import DEFAULT_MIRROR, _add_user, _slim

# One line per runtime family (bash and perl-base come with minbase). Only Depends are pulled
# in (debootstrap ignores Recommends); -headless / -cli variants keep X11 and servers out.
PACKAGES = (
    "python3", "python3-pytest",          # python, pytest
    "gcc", "g++", "libc6-dev",            # c, cpp
    "golang-go",                          # go
    "default-jdk-headless",               # java
    "nodejs", "node-typescript",          # nodejs, typescript (tsc)
    "rustc",                              # rust
    "ruby", "php-cli", "lua5.4", "perl",  # ruby, php, lua, perl
)
_DONE = ".corral-complete"
DEFAULT_CACHE_DIR = "/var/cache/corral/fncall"


def default_rootfs_dir() -> Path:
    return Path(os.environ.get("CORRAL_FNCALL_CACHE_DIR") or DEFAULT_CACHE_DIR) / "judge" / "rootfs"


# What no judge run needs (measured on bookworm: ~165 MB of the ~1.8 GB): the JDK's jmods (for
# jlink), Go's own test suite and test data, translations.
_TOOLCHAIN_CRUFT = ("usr/lib/jvm/*/jmods", "usr/share/go-*/test", "usr/share/go-*/src/**/testdata", "usr/share/locale/*")


def slim_toolchains(root: Path) -> None:
    for pattern in _TOOLCHAIN_CRUFT:
        for path in sorted(root.glob(pattern), reverse=True):
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                shutil.rmtree(path)


def cache_key(suite: str = "bookworm", packages: tuple[str, ...] = PACKAGES) -> str:
    """What a finished tree's marker says: changes whenever the suite or the package list does."""
    listed = " ".join(sorted(packages))
    return f"{suite} {hashlib.sha256(listed.encode()).hexdigest()[:16]} {listed}"


def is_complete(root: str | Path, suite: str = "bookworm") -> bool:
    """A finished tree built from today's package list (an older one is rebuilt)."""
    root = Path(root)
    done = root.parent / (root.name + _DONE)
    try:
        return root.is_dir() and done.read_text().strip() == cache_key(suite)
    except OSError:
        return False


def build_judge(out_dir: str | Path | None = None, *, suite: str = "bookworm", mirror: str = DEFAULT_MIRROR,
                rebuild: bool = False, **_: object) -> Path:
    root = Path(out_dir) if out_dir else default_rootfs_dir()
    done = root.parent / (root.name + _DONE)
    if is_complete(root, suite) and not rebuild:
        return root
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
    slim_toolchains(partial)
    sandbox_dirs(partial)
    _add_user(partial)
    # Mount points the fncall sandbox binds over (read-only image, fresh tmpfs per run).
    for d in ("work",):
        (partial / d).mkdir(exist_ok=True)
        os.chmod(partial / d, 0o755)  # noqa: S103 - a directory of the sandbox's rootfs
    os.replace(partial, root)
    done.write_text(cache_key(suite) + "\n")
    return root
