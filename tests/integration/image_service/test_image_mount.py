"""The blobs are real EROFS images: mount them straight from the file (mount(2), no loop
device) and look inside. Also builds the busybox base through the CLI."""

import ctypes
import io
import os
import stat
import tarfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from corral_image_service import cli

MS_RDONLY = 1


def _erofs_available() -> bool:
    try:
        return "erofs" in Path("/proc/filesystems").read_text()
    except OSError:
        return False


pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting EROFS and building rootfs (chroot, chown) needs root"),
    pytest.mark.skipif(not _erofs_available(), reason="kernel has no erofs filesystem (modprobe erofs)"),
]

_libc = ctypes.CDLL(None, use_errno=True)


@contextmanager
def mounted(blob: Path, target: Path):
    target.mkdir(parents=True, exist_ok=True)
    if _libc.mount(os.fsencode(blob.resolve()), os.fsencode(target.resolve()), b"erofs", MS_RDONLY, None) != 0:
        err = ctypes.get_errno()
        pytest.skip(f"mount(2) of erofs from a file failed: {os.strerror(err)} (needs CAP_SYS_ADMIN, kernel >= 6.12)")
    try:
        yield target
    finally:
        _libc.umount2(os.fsencode(target.resolve()), 0)


def _blob(data_dir: Path, digest: str) -> Path:
    return data_dir / "blobs" / "sha256" / digest.removeprefix("sha256:")


def test_uploaded_tar_mounts_with_modes_and_owners(client, data_dir, tmp_path):
    src = tmp_path / "src"
    (src / "etc").mkdir(parents=True)
    (src / "etc/motd").write_text("welcome to corral\n")
    (src / "bin").mkdir()
    (src / "bin/suid").write_bytes(b"\x7fELF")
    os.chown(src / "bin/suid", 0, 0)
    os.chmod(src / "bin/suid", 0o4755)
    (src / "tmp").mkdir()
    os.chmod(src / "tmp", 0o1777)
    (src / "home/user").mkdir(parents=True)
    os.chown(src / "home/user", 1000, 1000)
    os.symlink("/bin/suid", src / "bin/link")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.add(src, arcname=".")
    r = client.post("/v1/layers", params={"kind": "base", "name": "m", "version": "1"}, content=buf.getvalue(),
                    headers={"Content-Type": "application/x-tar"})
    assert r.status_code == 201, r.text

    with mounted(_blob(data_dir, r.json()["digest"]), tmp_path / "mnt") as mnt:
        assert (mnt / "etc/motd").read_text() == "welcome to corral\n"
        assert stat.S_IMODE((mnt / "bin/suid").stat().st_mode) == 0o4755
        assert stat.S_IMODE((mnt / "tmp").stat().st_mode) == 0o1777
        home = (mnt / "home/user").stat()
        assert (home.st_uid, home.st_gid) == (1000, 1000)
        assert os.readlink(mnt / "bin/link") == "/bin/suid"
        assert stat.S_IMODE(mnt.stat().st_mode) == 0o755


def test_cli_builds_busybox_base_and_it_runs(client, data_dir, tmp_path):
    work = tmp_path / "work"
    argv = ["build-base", "busybox", "--name", "busybox", "--version", "1.35", "--environment", "bb",
            "--work-dir", str(work)]
    assert cli.main(argv, client=client) == 0
    env = client.get("/v1/environments/bb").json()
    assert env["base"] == "busybox:1.35" and len(env["layers"]) == 1
    digest = env["layers"][0]["digest"]

    # Re-running rebuilds the tree from scratch and lands on the same digest: 200s, no error.
    assert cli.main(argv, client=client) == 0
    assert client.get("/v1/layers/busybox/1.35").json()["digest"] == digest
    assert len(list((data_dir / "blobs" / "sha256").iterdir())) == 1

    with mounted(_blob(data_dir, digest), tmp_path / "mnt") as mnt:
        assert os.readlink(mnt / "bin/sh") == "/bin/busybox"
        assert "user:x:1000:1000::/home/user:/bin/sh" in (mnt / "etc/passwd").read_text()
        assert stat.S_IMODE((mnt / "tmp").stat().st_mode) == 0o1777
        assert (mnt / "home/user").stat().st_uid == 1000
        assert (mnt / "etc/hostname").read_text().strip() == "corral"
        for d in ("proc", "sys", "dev", "root"):
            assert (mnt / d).is_dir()
        import subprocess

        out = subprocess.run(["chroot", str(mnt), "/bin/sh", "-c", "echo $((6*7))"], capture_output=True, text=True,
                             check=False)
        assert out.stdout.strip() == "42", out


def test_cli_reports_conflict(client, tmp_path, capsys):
    src = tmp_path / "other"
    src.mkdir()
    (src / "x").write_text("x")
    client.post("/v1/layers", params={"kind": "base", "name": "busybox", "version": "1", "source_dir": str(src)})
    with pytest.raises(SystemExit, match="409"):
        cli.main(["build-base", "busybox", "--name", "busybox", "--version", "1", "--work-dir", str(tmp_path / "w")],
                 client=client)
