"""Build EROFS images reproducibly: same tree content -> same bytes -> same digest.

``-T0`` pins every inode timestamp and the superblock build time, ``-U`` pins the
filesystem UUID (random otherwise). mkfs.erofs sorts directory entries itself, so the
order files were created in does not matter (checked by the tests).
"""

import subprocess
from pathlib import Path

FIXED_UUID = "00000000-0000-0000-0000-000000000000"


class ErofsBuildError(RuntimeError):
    pass


def mkfs_erofs(src_dir: str | Path, out_file: str | Path, mkfs: str = "mkfs.erofs") -> None:
    cmd = [mkfs, "-zlz4hc", "-T0", "-U", FIXED_UUID, "--quiet", str(out_file), str(src_dir)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise ErofsBuildError(f"{mkfs} not found: install erofs-utils") from exc
    if proc.returncode != 0:
        raise ErofsBuildError(f"mkfs.erofs failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-2000:]}")
