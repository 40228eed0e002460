"""Apply OCI/Docker image layers (uncompressed tars) in order onto one directory tree.

Semantics (OCI image-spec "Applying Changesets"):
- ``.wh.<name>`` deletes ``<name>`` of the layers below (not of its own layer);
- ``.wh..wh..opq`` in a directory hides everything the layers below put in it;
- an entry replaces what was at its path (a directory over a directory keeps the children);
- hard links point at a path of the tree as it stands (this layer or one below).

Each layer is read twice: its whiteouts first (they only ever apply to the layers below),
then its entries. Every path is resolved inside the tree (``inroot``): a symlink in the
image can never make a write land outside it. Owners and modes are kept as numbers
(setuid/setgid included: in a sandbox they mean the sandbox's own user namespace, and
every exec runs with no_new_privs). Device nodes are refused except under /dev (dropped:
the runtime provides /dev); extended attributes are not carried over.

``overlay=True`` renders the result as an overlay layer to stack on other layers instead
(a base/workspace split): deletions become whiteouts (0:0 character devices) and opaque
directories carry ``trusted.overlay.opaque=y``, which overlayfs reads in a lower layer.
"""

import os
import stat
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from corral_image_service.imports.inroot import Root, clear_dir, openat2_in_root, remove_entry
from corral_image_service.layers import tarsafe

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
OPAQUE_XATTR = "trusted.overlay.opaque"


class LayerError(Exception):
    """An image layer that cannot be applied safely; ``code`` says which kind."""

    def __init__(self, message: str, code: str = "unsafe_image"):
        super().__init__(message)
        self.code = code


@dataclass
class Budget:
    """Bytes of file data the image may unpack to, as the tar headers claim them, and its entries."""

    limit: int
    used: int = 0
    entries: int = 0

    def count_entry(self, name: str) -> None:
        self.entries += 1
        if self.entries > tarsafe.MAX_TAR_ENTRIES:  # (read at the call: a test lowers it)
            raise LayerError(f"{name!r}: the image has more than {tarsafe.MAX_TAR_ENTRIES} entries", "image_too_large")

    def take(self, size: int, name: str) -> None:
        self.used += size
        if self.used > self.limit:
            raise LayerError(f"{name!r}: the image unpacks to more than {self.limit} bytes", "image_too_large")


def clean_name(name: str) -> str:
    """A member name as a path inside the tree ("" is the root); ``..`` is refused."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise LayerError(f"{name!r}: path contains '..'")
    return "/".join(parts)


def _split(path: str) -> tuple[str, str]:
    parent, _, base = path.rpartition("/")
    return parent, base


def _is_whiteout_dev(dir_fd: int, name: str) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


class Flattener:
    def __init__(self, root: str, budget: Budget, *, overlay: bool = False):
        self.root = Root(root)
        self.budget = budget
        self.overlay = overlay

    def close(self) -> None:
        self.root.close()

    # ---- one layer ---------------------------------------------------------------------

    def apply(self, layer_tar: str, progress: Callable[[int], None] = lambda n: None) -> None:
        try:
            with tarfile.open(layer_tar, "r:") as tf:
                members, claimed = [], 0
                for member in tf:  # each header checked before the next is looked for
                    self.budget.count_entry(member.name)
                    if member.isfile():
                        claimed += member.size
                        if self.budget.used + claimed > self.budget.limit:
                            raise LayerError(f"{member.name!r}: the image unpacks to more than "
                                             f"{self.budget.limit} bytes", "image_too_large")
                    members.append(member)
                self._whiteouts(members)
                for i, member in enumerate(members):
                    if not self._is_whiteout(member):
                        self._entry(tf, member)
                    if i % 1000 == 0:
                        progress(i)
        except tarfile.TarError as exc:
            raise LayerError(f"not a readable layer tar: {exc}", "invalid_image") from exc
        except EOFError as exc:
            raise LayerError(f"truncated layer: {exc}", "invalid_image") from exc

    @staticmethod
    def _is_whiteout(member: tarfile.TarInfo) -> bool:
        return _split(clean_name(member.name))[1].startswith(WHITEOUT)

    def _whiteouts(self, members: Iterable[tarfile.TarInfo]) -> None:
        for member in members:
            path = clean_name(member.name)
            parent, base = _split(path)
            if not base.startswith(WHITEOUT):
                continue
            if base == OPAQUE:
                self._opaque(parent)
                continue
            target = base[len(WHITEOUT):]
            if not target or target in (".", "..") or target.startswith(WHITEOUT):
                raise LayerError(f"{member.name!r}: malformed whiteout")
            try:
                dir_fd = self.root.open_dir(parent, create=self.overlay)
            except (FileNotFoundError, NotADirectoryError):
                continue  # nothing below to delete
            try:
                remove_entry(dir_fd, target)
                if self.overlay:
                    os.mknod(target, stat.S_IFCHR | 0o000, os.makedev(0, 0), dir_fd=dir_fd)
            finally:
                os.close(dir_fd)

    def _opaque(self, path: str) -> None:
        try:
            fd = openat2_in_root(self.root.fd, path, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            if not self.overlay:
                return
            fd = None
        if fd is None:  # overlay: the directory may only exist below; make it here, opaque
            parent, base = _split(path)
            dir_fd = self.root.open_dir(parent, create=True)
            try:
                remove_entry(dir_fd, base)
                os.mkdir(base, 0o755, dir_fd=dir_fd)
                fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)
        try:
            clear_dir(fd)
            if self.overlay:
                os.setxattr(fd, OPAQUE_XATTR, b"y")
        finally:
            os.close(fd)

    # ---- one entry ---------------------------------------------------------------------

    def _entry(self, tf: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        path = clean_name(member.name)
        if not path:
            if member.isdir():
                self._set_attrs_path("", member)
            return
        if member.ischr() or member.isblk():
            if path.startswith("dev/"):
                return
            raise LayerError(f"{member.name!r}: device node outside /dev")
        if member.isfile():
            self.budget.take(member.size, member.name)
        parent, base = _split(path)
        try:
            dir_fd = self.root.open_dir(parent, create=True)
        except (NotADirectoryError, FileNotFoundError) as exc:
            raise LayerError(f"{member.name!r}: its parent is not a directory in the image") from exc
        try:
            if member.isdir():
                self._dir(dir_fd, base, member)
            elif member.isfile():
                self._file(tf, dir_fd, base, member)
            elif member.issym():
                self._replace(dir_fd, base)
                os.symlink(member.linkname, base, dir_fd=dir_fd)
                self._chown(dir_fd, base, member)
            elif member.islnk():
                self._hardlink(dir_fd, base, member)
            elif member.isfifo():
                self._replace(dir_fd, base)
                os.mkfifo(base, member.mode & 0o7777, dir_fd=dir_fd)
                self._chown(dir_fd, base, member)
            else:
                raise LayerError(f"{member.name!r}: unsupported member type {member.type!r}")
        finally:
            os.close(dir_fd)

    def _replace(self, dir_fd: int, name: str, keep_dir: bool = False) -> bool:
        """Clear ``name`` for a new entry; True if a whiteout device stood there (overlay)."""
        whiteout = self.overlay and _is_whiteout_dev(dir_fd, name)
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if keep_dir and stat.S_ISDIR(st.st_mode):
            return False
        remove_entry(dir_fd, name)
        return whiteout

    def _dir(self, dir_fd: int, name: str, member: tarfile.TarInfo) -> None:
        was_whiteout = self._replace(dir_fd, name, keep_dir=True)
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
        except FileExistsError:
            pass
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            if was_whiteout:  # deleted below, made again here: nothing of below shows through
                os.setxattr(fd, OPAQUE_XATTR, b"y")
            self._set_attrs_fd(fd, member)
        finally:
            os.close(fd)

    def _file(self, tf: tarfile.TarFile, dir_fd: int, name: str, member: tarfile.TarInfo) -> None:
        self._replace(dir_fd, name)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            src = tf.extractfile(member)
            remaining = member.size
            while remaining > 0:
                piece = src.read(min(1 << 20, remaining))
                if not piece:
                    raise LayerError(f"{member.name!r}: truncated file data", "invalid_image")
                os.write(fd, piece)
                remaining -= len(piece)
            self._set_attrs_fd(fd, member)
        finally:
            os.close(fd)

    def _hardlink(self, dir_fd: int, name: str, member: tarfile.TarInfo) -> None:
        target = clean_name(member.linkname)
        tparent, tbase = _split(target)
        if not tbase:
            raise LayerError(f"{member.name!r}: hard link to the root")
        try:
            src_fd = self.root.open_dir(tparent)
        except OSError as exc:
            raise LayerError(f"{member.name!r}: hard link to missing {member.linkname!r}") from exc
        try:
            st = os.stat(tbase, dir_fd=src_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                raise LayerError(f"{member.name!r}: hard link to a directory")
            try:
                if os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_ino == st.st_ino:
                    return  # already that file
            except FileNotFoundError:
                pass
            self._replace(dir_fd, name)
            os.link(tbase, name, src_dir_fd=src_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError as exc:
            raise LayerError(f"{member.name!r}: hard link to missing {member.linkname!r}") from exc
        finally:
            os.close(src_fd)

    # ---- owners and modes --------------------------------------------------------------

    @staticmethod
    def _set_attrs_fd(fd: int, member: tarfile.TarInfo) -> None:
        try:
            os.fchown(fd, member.uid, member.gid)
        except PermissionError:
            pass  # not root: files stay ours (tarfile does the same)
        # After chown, which clears setuid/setgid.
        os.fchmod(fd, member.mode & 0o7777)

    def _set_attrs_path(self, rel: str, member: tarfile.TarInfo) -> None:
        fd = openat2_in_root(self.root.fd, rel, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._set_attrs_fd(fd, member)
        finally:
            os.close(fd)

    @staticmethod
    def _chown(dir_fd: int, name: str, member: tarfile.TarInfo) -> None:
        try:
            os.chown(name, member.uid, member.gid, dir_fd=dir_fd, follow_symlinks=False)
        except PermissionError:
            pass
