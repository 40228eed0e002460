"""A ~2 MB rootfs: static busybox plus the sandbox skeleton. Rebuilt from scratch each time;
the content is deterministic, so the EROFS digest is too."""

import os
import shutil
import subprocess
from pathlib import Path

from corral_image_service.builders.common import mkdir, sandbox_dirs, write


def _install_applets(root: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chroot", str(root), "/bin/busybox", "--install", "-s"], check=True)
        return
    # Without root there is no chroot: create the same absolute symlinks ourselves.
    out = subprocess.run([str(root / "bin/busybox"), "--list-full"], check=True,
                         capture_output=True, text=True).stdout
    for rel in out.split():
        link = root / rel
        if not link.exists() and not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/bin/busybox")


def build_busybox(out_dir: str | Path, *, busybox: str = "/bin/busybox", **_: object) -> Path:
    root = Path(out_dir)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc"):
        mkdir(root, d, 0o755)
    shutil.copy2(busybox, root / "bin/busybox")
    os.chmod(root / "bin/busybox", 0o755)  # noqa: S103 - every sandbox user runs it
    _install_applets(root)
    sandbox_dirs(root)
    write(root, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n")
    write(root, "etc/group", "root:x:0:\nuser:x:1000:\n")
    return root
