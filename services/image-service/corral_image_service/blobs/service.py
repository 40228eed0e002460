"""Content-addressed blob store: ``<data_dir>/blobs/sha256/<hex>``.

Blobs are written under ``<data_dir>/tmp`` (same filesystem) and renamed into place, so a
reader never sees a partial blob and a crash leaves only tmp litter.
"""

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from corral_image_service.blobs.schemas import DIGEST_RE


class BlobStore:
    def __init__(self, data_dir: str | Path):
        self.data_dir = Path(data_dir)
        self.root = self.data_dir / "blobs" / "sha256"
        self.tmp = self.data_dir / "tmp"

    def ensure_dirs(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)

    def clean_tmp(self, older_than_s: float = 24 * 3600) -> None:
        # Only old litter: another worker process may be mid-upload right now.
        cutoff = time.time() - older_than_s
        for entry in self.tmp.iterdir():
            try:
                if entry.lstat().st_mtime < cutoff:
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            except OSError:
                pass

    def path_for(self, digest: str) -> Path:
        if not DIGEST_RE.match(digest):
            raise ValueError(f"malformed digest {digest!r}")
        return self.root / digest.split(":", 1)[1]

    def exists(self, digest: str) -> bool:
        return self.path_for(digest).is_file()

    def tmp_file(self, suffix: str = "") -> Path:
        fd, name = tempfile.mkstemp(dir=self.tmp, suffix=suffix)
        os.close(fd)
        return Path(name)

    def tmp_dir(self, suffix: str = "") -> Path:
        return Path(tempfile.mkdtemp(dir=self.tmp, suffix=suffix))

    def ingest(self, tmp_path: Path) -> tuple[str, int]:
        """Move a finished temp file into the store; returns (digest, size)."""
        h = hashlib.sha256()
        size = 0
        with open(tmp_path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                size += len(chunk)
            os.fsync(f.fileno())
        digest = f"sha256:{h.hexdigest()}"
        final = self.path_for(digest)
        if final.is_file():
            tmp_path.unlink()
        else:
            os.chmod(tmp_path, 0o444)
            os.replace(tmp_path, final)
            dir_fd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return digest, size
