"""A container's writable layer (the overlay's upper dir) as an OCI layer tar: what a commit
uploads (DSec's ``pack_diff``).

Overlayfs records a deletion as a 0:0 character device and a directory that hides the layers
below as one with ``trusted.overlay.opaque=y``; the tar says the same in OCI's words
(``.wh.<name>``, ``.wh..wh..opq``), which image-service turns back into overlay form for the
diff layer it builds. Owners are the sandbox's own ids (host id minus the range's base), hard
links inside the upper dir stay hard links, nothing is followed through a symlink.
"""

import errno
import os
import stat
import tarfile

OPAQUE_XATTR = "trusted.overlay.opaque"
NOBODY = 65534


def _owner(host_id: int, base: int, size: int) -> int:
    inside = host_id - base
    return inside if 0 <= inside < size else NOBODY


def _opaque(path: str) -> bool:
    try:
        return os.getxattr(path, OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EPERM):
            return False
        raise


def write_diff_tar(upper: str, out_path: str, id_base: int = 0, id_size: int = 65536) -> int:
    """Write the diff of ``upper`` to ``out_path``; returns the number of entries."""
    seen: dict[tuple[int, int], str] = {}
    count = 0
    with tarfile.open(out_path, "w", format=tarfile.PAX_FORMAT) as tf:
        def info(name: str, st: os.stat_result, kind: bytes) -> tarfile.TarInfo:
            ti = tarfile.TarInfo(name)
            ti.type = kind
            ti.mode = stat.S_IMODE(st.st_mode)
            ti.uid, ti.gid = _owner(st.st_uid, id_base, id_size), _owner(st.st_gid, id_base, id_size)
            ti.mtime = int(st.st_mtime)
            return ti

        def walk(rel: str) -> None:
            nonlocal count
            directory = os.path.join(upper, rel) if rel else upper
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
            for entry in entries:
                name = f"{rel}/{entry.name}" if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                count += 1
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                    whiteout = tarfile.TarInfo(f"{rel}/.wh.{entry.name}" if rel else f".wh.{entry.name}")
                    tf.addfile(whiteout)
                elif stat.S_ISDIR(st.st_mode):
                    tf.addfile(info(name, st, tarfile.DIRTYPE))
                    if _opaque(entry.path):
                        tf.addfile(tarfile.TarInfo(f"{name}/.wh..wh..opq"))
                    walk(name)
                elif stat.S_ISLNK(st.st_mode):
                    ti = info(name, st, tarfile.SYMTYPE)
                    ti.linkname = os.readlink(entry.path)
                    tf.addfile(ti)
                elif stat.S_ISREG(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    if st.st_nlink > 1 and key in seen:
                        ti = info(name, st, tarfile.LNKTYPE)
                        ti.linkname = seen[key]
                        tf.addfile(ti)
                        continue
                    seen[key] = name
                    ti = info(name, st, tarfile.REGTYPE)
                    ti.size = st.st_size
                    fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                    with os.fdopen(fd, "rb") as fh:
                        tf.addfile(ti, fh)
                elif stat.S_ISFIFO(st.st_mode):
                    tf.addfile(info(name, st, tarfile.FIFOTYPE))
                # sockets and real device nodes (a sandbox cannot make any) are not carried

        walk("")
    return count
