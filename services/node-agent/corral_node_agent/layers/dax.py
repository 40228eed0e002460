"""DAX-capable variants of EROFS layers, for VMs that map a layer with virtio-pmem.

Our layers are lz4hc-compressed EROFS. A guest can mount an image with ``dax=always`` (file
pages mapped straight from the host's page cache, so N VMs share one copy) only when file
data is stored uncompressed, block-aligned and not inlined next to the inode, and a
virtio-pmem region must be a multiple of 2 MiB. So the node derives, once per layer digest,
an uncompressed EROFS (``mkfs.erofs -Enoinline_data``, no ``-z``) from the mounted layer,
padded with zeros to 2 MiB (EROFS ignores bytes past its last block).

Ownership, modes, xattrs and hard links come from the mounted tree as they are (no
``--all-root``); ``-T0`` and a fixed UUID make the bytes depend on the tree only.

dax/<hex>.erofs   the variant, read-only (0444), written to a temp file and renamed
dax/<hex>.json    sidecar {"source_digest", "size", "format"}: the variant is trusted after
                  a restart only when the sidecar names it and the size matches
"""

import json
import os
import subprocess
import tempfile

DAX_ALIGN = 2 * 1024 * 1024
DAX_FORMAT = "erofs-uncompressed-noinline-2m"
FIXED_UUID = "00000000-0000-0000-0000-000000000000"


class DaxBuildError(RuntimeError):
    pass


def sidecar_path(image_path: str) -> str:
    return image_path.removesuffix(".erofs") + ".json"


def is_trusted(image_path: str, source_digest: str) -> bool:
    """A finished variant of ``source_digest`` is at ``image_path`` (per its sidecar)."""
    try:
        with open(sidecar_path(image_path)) as fh:
            meta = json.load(fh)
        size = os.stat(image_path).st_size
    except (OSError, ValueError):
        return False
    return (isinstance(meta, dict) and meta.get("source_digest") == source_digest
            and meta.get("format") == DAX_FORMAT and meta.get("size") == size and size % DAX_ALIGN == 0)


def _write_atomically(path: str, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def build_dax_image(src_dir: str, image_path: str, source_digest: str, *, mkfs: str = "mkfs.erofs") -> int:
    """Build the variant of the tree at ``src_dir`` into ``image_path``; returns its size.

    Blocking (mkfs reads the whole tree: run it in a worker thread). The image appears
    under its name only when complete; the sidecar is written after it, so a crash in
    between leaves an image that is simply rebuilt.
    """
    directory = os.path.dirname(image_path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".erofs")
    os.close(fd)
    try:
        cmd = [mkfs, "-Enoinline_data", "-T0", "-U", FIXED_UUID, "--quiet", tmp, src_dir]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except FileNotFoundError as exc:
            raise DaxBuildError(f"{mkfs} not found: install erofs-utils") from exc
        if proc.returncode != 0:
            raise DaxBuildError(f"mkfs.erofs failed ({proc.returncode}): "
                                f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
        size = -(-os.stat(tmp).st_size // DAX_ALIGN) * DAX_ALIGN
        os.truncate(tmp, size)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o444)
        os.replace(tmp, image_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    meta = {"source_digest": source_digest, "size": size, "format": DAX_FORMAT}
    _write_atomically(sidecar_path(image_path), json.dumps(meta).encode(), 0o444)
    return size
