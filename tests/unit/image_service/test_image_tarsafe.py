"""The rootfs tar filter: refuses anything that could write outside the layer, keeps
what a root filesystem needs (setuid, sticky /tmp, numeric ownership, absolute symlinks)."""

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from corral_image_service.layers.tarsafe import (
    UnsafeMemberError,
    rootfs_filter,
    safe_extract,
)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create files owned by other uids")


def _member(name: str, *, type=tarfile.REGTYPE, data: bytes = b"", mode: int = 0o644, linkname: str = "",
            uid: int = 0, gid: int = 0) -> tuple[tarfile.TarInfo, bytes | None]:
    ti = tarfile.TarInfo(name)
    ti.type = type
    ti.mode = mode
    ti.uid, ti.gid = uid, gid
    ti.linkname = linkname
    ti.size = len(data) if type == tarfile.REGTYPE else 0
    return ti, (data if type == tarfile.REGTYPE else None)


def _tar(tmp_path: Path, *members: tuple[tarfile.TarInfo, bytes | None]) -> Path:
    path = tmp_path / "layer.tar"
    with tarfile.open(path, "w") as tf:
        for ti, data in members:
            tf.addfile(ti, io.BytesIO(data) if data is not None else None)
    return path


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    d = tmp_path / "root"
    d.mkdir()
    return d


def _assert_nothing_outside(tmp_path: Path) -> None:
    assert sorted(p.name for p in tmp_path.iterdir()) == ["layer.tar", "root"]


@pytest.mark.parametrize("name", ["../evil", "a/../../evil", "./../evil", "a/b/../../../evil"])
def test_path_traversal_rejected(tmp_path, dest, name):
    with pytest.raises(UnsafeMemberError, match=r"\.\."):
        safe_extract(_tar(tmp_path, _member(name, data=b"x")), dest)
    _assert_nothing_outside(tmp_path)


def test_absolute_path_rejected(tmp_path, dest):
    with pytest.raises(UnsafeMemberError, match="absolute"):
        safe_extract(_tar(tmp_path, _member(str(tmp_path / "evil"), data=b"x")), dest)
    _assert_nothing_outside(tmp_path)


def test_relative_symlink_escaping_root_rejected(tmp_path, dest):
    tar = _tar(tmp_path, _member("etc", type=tarfile.DIRTYPE, mode=0o755),
               _member("etc/evil", type=tarfile.SYMTYPE, linkname="../../outside"))
    with pytest.raises(UnsafeMemberError, match="escapes"):
        safe_extract(tar, dest)


def test_write_through_symlink_to_outside_rejected(tmp_path, dest):
    outside = tmp_path / "outside"
    outside.mkdir()
    # The symlink itself is fine in a rootfs (absolute = relative to the layer root at
    # runtime), but extraction must not follow it on the host.
    tar = _tar(tmp_path, _member("escape", type=tarfile.SYMTYPE, linkname=str(outside)),
               _member("escape/pwned", data=b"x"))
    with pytest.raises(UnsafeMemberError, match="outside"):
        safe_extract(tar, dest)
    assert list(outside.iterdir()) == []


def test_overwrite_through_symlink_rejected(tmp_path, dest):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    tar = _tar(tmp_path, _member("x", type=tarfile.SYMTYPE, linkname=str(victim)), _member("x", data=b"pwned"))
    with pytest.raises(UnsafeMemberError):
        safe_extract(tar, dest)
    assert victim.read_text() == "keep"


@pytest.mark.parametrize("linkname", ["/etc/passwd", "../outside", "a/../../outside"])
def test_hardlink_outside_rejected(tmp_path, dest, linkname):
    (tmp_path / "outside").write_text("secret")
    with pytest.raises(UnsafeMemberError, match="hard link"):
        safe_extract(_tar(tmp_path, _member("h", type=tarfile.LNKTYPE, linkname=linkname)), dest)
    assert not (dest / "h").exists()


def test_rootfs_bits_kept(tmp_path, dest):
    tar = _tar(
        tmp_path,
        _member("./", type=tarfile.DIRTYPE, mode=0o755),
        _member("tmp", type=tarfile.DIRTYPE, mode=0o1777),
        _member("bin", type=tarfile.DIRTYPE, mode=0o755),
        _member("bin/busybox", data=b"\x7fELF", mode=0o755),
        _member("bin/su", data=b"\x7fELF", mode=0o4755),
        _member("bin/wall", data=b"\x7fELF", mode=0o2755),
        _member("bin/sh", type=tarfile.SYMTYPE, linkname="/bin/busybox"),
        _member("usr", type=tarfile.DIRTYPE, mode=0o755),
        _member("usr/bin", type=tarfile.SYMTYPE, linkname="../bin"),
        _member("bin/ls", type=tarfile.LNKTYPE, linkname="bin/busybox"),
        _member("dev", type=tarfile.DIRTYPE, mode=0o755),
        _member("dev/null", type=tarfile.CHRTYPE, mode=0o666),
    )
    safe_extract(tar, dest)
    assert stat.S_IMODE((dest / "tmp").stat().st_mode) == 0o1777
    assert stat.S_IMODE((dest / "bin/su").stat().st_mode) == 0o4755
    assert stat.S_IMODE((dest / "bin/wall").stat().st_mode) == 0o2755
    assert os.readlink(dest / "bin/sh") == "/bin/busybox"
    assert os.readlink(dest / "usr/bin") == "../bin"
    assert (dest / "bin/ls").stat().st_ino == (dest / "bin/busybox").stat().st_ino
    # Device nodes are dropped: the runtime provides /dev.
    assert list((dest / "dev").iterdir()) == []


def test_root_dir_not_left_0700(tmp_path):
    import tempfile

    dest = Path(tempfile.mkdtemp(dir=tmp_path))
    safe_extract(_tar(tmp_path, _member("f", data=b"x")), dest)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755


@needs_root
def test_numeric_ownership_kept(tmp_path, dest):
    # uid 4242 has no name on the host: ownership must come from the numbers, not names.
    ti, data = _member("home", type=tarfile.DIRTYPE, mode=0o755)
    ti2, _ = _member("home/user", type=tarfile.DIRTYPE, mode=0o750, uid=1000, gid=1000)
    ti2.uname, ti2.gname = "root", "root"  # a name that exists on the host must not win
    ti3, data3 = _member("home/user/f", data=b"x", mode=0o4750, uid=4242, gid=4243)
    safe_extract(_tar(tmp_path, (ti, data), (ti2, None), (ti3, data3)), dest)
    st = (dest / "home/user").stat()
    assert (st.st_uid, st.st_gid) == (1000, 1000)
    st = (dest / "home/user/f").stat()
    assert (st.st_uid, st.st_gid) == (4242, 4243)
    # chown clears setuid; the mode must be applied after it.
    assert stat.S_IMODE(st.st_mode) == 0o4750


def test_filter_returns_member_untouched(tmp_path, dest):
    ti, _ = _member("bin/su", mode=0o4755, uid=0, gid=0)
    assert rootfs_filter(ti, str(dest)) is ti
