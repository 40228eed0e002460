"""Extract a root-filesystem tar without letting it write outside the target directory.

``tarfile.data_filter`` is too strict for a rootfs (it drops setuid bits, the sticky bit
of /tmp and ownership) and ``tarfile.tar_filter`` also strips setuid/sticky bits and, in
Python 3.11, does not look at link targets at all. So we use ``tar_filter`` only for its
path check (which resolves already-extracted symlinks on disk, the classic
"symlink then write through it" attack) and add our own checks on names and links,
while handing the member back untouched so mode bits and numeric ownership survive.

Link policy, because a rootfs is a different namespace from the host:
- hard links must point inside the tree (tarfile joins ``dest + linkname``, so an
  absolute or ``..`` linkname would hard-link a host file into the layer);
- absolute symlinks are allowed: inside the sandbox they resolve against the layer's
  own root (busybox's ``/bin/sh -> /bin/busybox``, Debian's ``/etc/localtime``);
- relative symlinks whose ``..`` climb above the layer root are rejected.
Host code that reads files inside a mounted layer must still resolve paths as if
chrooted, since absolute symlinks would point into the host there.
"""

import os
import posixpath
import tarfile
from pathlib import Path


class UnsafeMemberError(tarfile.FilterError):
    def __init__(self, member: tarfile.TarInfo, reason: str):
        super().__init__(f"{member.name!r}: {reason}")
        self.tarinfo = member
        self.reason = reason


def _climbs_out(start_parts: list[str], rel: str) -> bool:
    depth = list(start_parts)
    for part in rel.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not depth:
                return True
            depth.pop()
        else:
            depth.append(part)
    return False


def rootfs_filter(member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo | None:
    name = member.name
    if name.startswith("/"):
        raise UnsafeMemberError(member, "absolute path")
    if ".." in name.split("/"):
        raise UnsafeMemberError(member, "path contains '..'")
    # The runtime provides /dev, so device nodes there are dropped (a debootstrap tree has
    # them); one anywhere else is refused: nothing needs it, and a sandbox must never reach a
    # host device through its image.
    if member.ischr() or member.isblk():
        if name.removeprefix("./").startswith("dev/"):
            return None
        raise UnsafeMemberError(member, "device node outside /dev")
    try:
        tarfile.tar_filter(member, dest_path)
    except tarfile.FilterError as exc:
        raise UnsafeMemberError(member, f"resolves outside the layer ({exc})") from exc

    dest = os.path.realpath(dest_path)
    if member.islnk():
        link = member.linkname
        if link.startswith("/") or ".." in link.split("/"):
            raise UnsafeMemberError(member, f"hard link to {link!r} outside the layer")
        target = os.path.realpath(os.path.join(dest, link))
        if os.path.commonpath([target, dest]) != dest:
            raise UnsafeMemberError(member, f"hard link to {link!r} resolves outside the layer")
    elif member.issym():
        link = member.linkname
        if not link.startswith("/"):
            parent = [p for p in posixpath.dirname(name).split("/") if p not in ("", ".")]
            if _climbs_out(parent, link):
                raise UnsafeMemberError(member, f"symlink to {link!r} escapes the layer root")
    return member


# Entries (files, dirs, links...) one tar, or one image over its layers, may have. tarfile keeps
# every header it has read (~0.5 KiB each) and the byte limit counts file data only: a tar of
# millions of empty files, a few MB compressed, would otherwise fill the image-service's memory.
# Large real images (CUDA + conda stacks) have a few 100,000.
MAX_TAR_ENTRIES = 1_000_000


class TooLargeError(tarfile.FilterError):
    """The members claim more bytes (or are more entries) than the caller allows, checked
    before any is read."""

    def __init__(self, member: tarfile.TarInfo, total: int, limit: int, unit: str = "bytes"):
        what = "files add up to" if unit == "bytes" else "entries are"
        super().__init__(f"{member.name!r}: the archive's {what} more than {limit} {unit} ({total} so far)")
        self.tarinfo = member
        self.limit = limit


def safe_extract(tar_path: str | Path, dest: str | Path, *, max_unpacked_bytes: int | None = None) -> None:
    """``max_unpacked_bytes``: refuse (TooLargeError) once the members' declared sizes pass
    it, before their data is read, so a header claiming 10 GB costs nothing; sparse members
    (whose size the header states apart from the bytes sent) count their full size."""
    dest = Path(dest)
    total = entries = 0

    def bounded(member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo | None:
        nonlocal total, entries
        entries += 1
        if entries > MAX_TAR_ENTRIES:
            raise TooLargeError(member, entries, MAX_TAR_ENTRIES, "entries")
        if max_unpacked_bytes is not None and member.isfile():
            total += member.size
            if total > max_unpacked_bytes:
                raise TooLargeError(member, total, max_unpacked_bytes)
        return rootfs_filter(member, dest_path)

    # mkdtemp gives 0700; without a "./" entry in the tar that would become the mode
    # of "/" in the sandbox and lock out non-root users.
    os.chmod(dest, 0o755)  # noqa: S103 - the sandbox's "/" (see above)
    with tarfile.open(tar_path, "r:*") as tf:
        tf.errorlevel = 1
        # numeric_owner: the uid/gid inside the rootfs matter, not the host's user names.
        tf.extractall(dest, filter=bounded, numeric_owner=True)  # noqa: S202 - rootfs_filter checks every member
