"""Build (once) the fncall runtime root filesystem: Debian bookworm minbase + the toolchains of
the 14 fncall languages (builders.judge.PACKAGES), via corral_image_service.builders.judge
(debootstrap: 381 s and 1.7 GB on the 2-core dev host, most of it go, the JDK, rustc/LLVM).

    python scripts/build_fncall_runtime.py [--cache-dir DIR] [--rebuild] [--mirror URL]

The tree is cached in ``<cache-dir>/judge/rootfs`` (rebuilt when the package list changes) (``CORRAL_FNCALL_CACHE_DIR``, default
/var/cache/corral/fncall), which node-agents read; a finished tree is reused, so CI builds
it once per machine and test sessions reuse it. Concurrent callers (pytest-xdist workers)
serialise on a lock file and the second one finds the tree done. Prints the rootfs path.
"""

import argparse
import fcntl
import os
import sys
from pathlib import Path


def ensure_runtime(cache_dir: str | None = None, *, rebuild: bool = False, mirror: str | None = None) -> Path:
    from corral_image_service.builders.judge import DEFAULT_CACHE_DIR, build_judge, is_complete

    cache = Path(cache_dir or os.environ.get("CORRAL_FNCALL_CACHE_DIR") or DEFAULT_CACHE_DIR)
    root = cache / "judge" / "rootfs"
    if is_complete(root) and not rebuild:
        return root
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kwargs = {"mirror": mirror} if mirror else {}
        return build_judge(root, rebuild=rebuild, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(prog="build_fncall_runtime")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--mirror", default=None)
    args = parser.parse_args()
    print(ensure_runtime(args.cache_dir, rebuild=args.rebuild, mirror=args.mirror))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "services/image-service"))
    main()
