"""The fncall ("judge") runtime base: Debian bookworm minbase + python3, gcc, g++ (bash is in
minbase), via debootstrap.

Same recipe and cache contract as ``builders.debian`` (a finished tree is marked complete next
to it and reused; ``rebuild=True`` starts over), with the compilers the online-judge runtimes
need. debootstrap takes minutes, so callers keep the tree in a cache dir that outlives test
sessions (``CORRAL_FNCALL_CACHE_DIR``, default ``/var/cache/corral/fncall``).
"""

import os
import shutil
import subprocess
from pathlib import Path

from corral_image_service.builders.common import sandbox_dirs
from corral_image_service.builders.debian import DEFAULT_MIRROR, _add_user, _slim

PACKAGES = ("python3", "gcc", "g++", "libc6-dev")
_DONE = ".corral-complete"
DEFAULT_CACHE_DIR = "/var/cache/corral/fncall"


def default_rootfs_dir() -> Path:
    return Path(os.environ.get("CORRAL_FNCALL_CACHE_DIR") or DEFAULT_CACHE_DIR) / "judge" / "rootfs"


def is_complete(root: str | Path) -> bool:
    root = Path(root)
    return root.is_dir() and (root.parent / (root.name + _DONE)).exists()


def build_judge(out_dir: str | Path | None = None, *, suite: str = "bookworm", mirror: str = DEFAULT_MIRROR,
                rebuild: bool = False, **_: object) -> Path:
    root = Path(out_dir) if out_dir else default_rootfs_dir()
    done = root.parent / (root.name + _DONE)
    if is_complete(root) and not rebuild:
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
    sandbox_dirs(partial)
    _add_user(partial)
    # Mount points the fncall sandbox binds over (read-only image, fresh tmpfs per run).
    for d in ("work",):
        (partial / d).mkdir(exist_ok=True)
        os.chmod(partial / d, 0o755)  # noqa: S103 - a directory of the sandbox's rootfs
    os.replace(partial, root)
    done.write_text(f"{suite} {mirror} {' '.join(PACKAGES)}\n")
    return root
