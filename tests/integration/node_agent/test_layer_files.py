"""Layer files and disk images for VMs: LayerCache.acquire_files / acquire_disk_image against a
real image-service (its own process, real HTTP), real EROFS, mkfs.erofs and qemu-img.

Needs root and /dev/fuse (the conftest enters a private mount namespace; the image-service
process started here inherits it, which does not matter to it).
"""

import asyncio
import hashlib
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time

import httpx
import pytest

from corral_common.contracts.images import EnvironmentLayer
from corral_host import mounts
from corral_image_service.builders import build_busybox
from corral_node_agent.errors import DiskImageNotFound, ImageUnavailable
from corral_node_agent.layers.dax import DAX_ALIGN, sidecar_path

pytestmark = [
    pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("qemu-img", "dump.erofs", "fsck.erofs")),
                       reason="needs qemu-img (qemu-utils) and dump.erofs/fsck.erofs (erofs-utils)"),
]

MiB = 1024 * 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _extend_tree(root: str) -> None:
    """What a rootfs carries besides plain files: ownership, odd modes, xattrs, hard links,
    symlinks, empty and multi-block files."""
    os.makedirs(f"{root}/opt/data", exist_ok=True)
    with open(f"{root}/opt/data/big.bin", "wb") as fh:
        fh.write(os.urandom(3 * MiB + 123))
    open(f"{root}/opt/data/empty", "wb").close()
    with open(f"{root}/opt/data/owned", "w") as fh:
        fh.write("owned by 1234:5678\n")
    os.chown(f"{root}/opt/data/owned", 1234, 5678)
    os.chmod(f"{root}/opt/data/owned", 0o640)
    shutil.copy(f"{root}/bin/busybox", f"{root}/opt/data/suid")
    os.chmod(f"{root}/opt/data/suid", 0o4755)
    os.setxattr(f"{root}/opt/data/owned", "user.corral", b"kept")
    os.setxattr(f"{root}/opt/data/suid", "security.capability",
                bytes.fromhex("0100000200200000000000000000000000000000"))  # cap_net_raw+ep
    os.link(f"{root}/opt/data/owned", f"{root}/opt/data/owned-hardlink")
    os.symlink("../data/big.bin", f"{root}/opt/data/link")
    os.makedirs(f"{root}/opt/private", mode=0o700, exist_ok=True)


def _tree_facts(root: str) -> dict[str, tuple]:
    """Everything a guest could observe of a tree (and inode sharing for hard links)."""
    facts: dict[str, tuple] = {}
    inodes: dict[int, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [".", *dirnames, *filenames] if dirpath == root else [*dirnames, *filenames]:
            p = os.path.normpath(os.path.join(dirpath, name))
            st = os.lstat(p)
            xattrs = tuple(sorted((k, os.getxattr(p, k, follow_symlinks=False))
                                  for k in os.listxattr(p, follow_symlinks=False)))
            if stat.S_ISLNK(st.st_mode):
                content = os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                content = _sha256_file(p)
            else:
                content = None
            first = inodes.setdefault(st.st_ino, os.path.relpath(p, root))
            facts[os.path.relpath(p, root)] = (st.st_mode, st.st_uid, st.st_gid, st.st_nlink, st.st_size,
                                               int(st.st_mtime), xattrs, content, first)
    return facts


async def _in_other_process(code: str, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, *args, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode().strip()


READ_ALL = "import hashlib,sys; print('sha256:' + hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())"
# How QEMU's memory-backend-file (share=on, readonly=on) maps a virtio-pmem image.
MMAP_ALL = ("import hashlib,mmap,sys; f = open(sys.argv[1], 'rb'); "
            "m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ); "
            "print('sha256:' + hashlib.sha256(m).hexdigest())")


@pytest.fixture(scope="module")
def images(work_dir):
    """A real image-service process with two layers and a qcow2 disk image."""
    data = tempfile.mkdtemp(prefix="images-", dir=work_dir)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "CORRAL_IMAGE_DATA_DIR": data, "CORRAL_IMAGE_PORT": str(port),
           "CORRAL_IMAGE_DATABASE_URL": "", "CORRAL_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen([sys.executable, "-m", "corral_image_service"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "image-service did not start"
            time.sleep(0.05)
        base_tree = str(build_busybox(f"{data}/trees/base"))
        _extend_tree(base_tree)
        ws_tree = f"{data}/trees/ws"
        os.makedirs(f"{ws_tree}/home/user/project")
        with open(f"{ws_tree}/home/user/project/README", "w") as fh:
            fh.write("workspace\n")
        with httpx.Client(base_url=url, timeout=60) as client:
            layers = {}
            for kind, tree in (("base", base_tree), ("workspace", ws_tree)):
                r = client.post("/v1/layers", params={"kind": kind, "name": kind, "version": "1", "source_dir": tree})
                assert r.status_code == 201, r.text
                layers[kind] = EnvironmentLayer.model_validate(r.json())
            raw = f"{data}/disk.raw"
            with open(raw, "wb") as fh:
                fh.write(b"corral disk image\n")
            os.truncate(raw, 32 * MiB)
            subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, f"{data}/disk.qcow2"], check=True)
            with open(f"{data}/disk.qcow2", "rb") as fh:
                r = client.post("/v1/disk-images", params={"name": "desktop", "version": "1", "format": "qcow2"},
                                content=fh.read())
            assert r.status_code == 201, r.text
            disk = r.json()
        yield {"url": url, "base": layers["base"], "ws": layers["workspace"], "base_tree": base_tree, "disk": disk}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def new_cache(images, layer_caches):
    """``new_cache(mode="lazy")``: a LayerCache on the real image-service."""
    return lambda mode="lazy": layer_caches(images["url"], mode=mode)


@pytest.mark.parametrize("mode", ["eager", "lazy"])
async def test_layer_files_can_be_read_and_mapped_by_another_process(images, new_cache, mode):
    cache = new_cache(mode)
    base, ws = images["base"], images["ws"]
    paths = await cache.acquire_files([base, ws], dax=False)
    want = [cache.store.path(base.digest), cache.store.path(ws.digest)] if mode == "eager" else \
        [cache.lazy.path(base.digest), cache.lazy.path(ws.digest)]
    assert paths == want  # given order, like acquire()
    assert cache.file_refcount(base.digest, dax=False) == 1
    # Another process (QEMU, for real) reads it and maps it: both see exactly the blob.
    assert await _in_other_process(READ_ALL, paths[1]) == ws.digest
    assert await _in_other_process(MMAP_ALL, paths[0]) == base.digest
    # And QEMU's block layer opens it read-only, as a virtio-blk drive does.
    qemu_io = await asyncio.create_subprocess_exec(
        "qemu-io", "-r", "-f", "raw", "-c", "read -v 1024 4", paths[0], stdout=subprocess.PIPE)
    out, _ = await qemu_io.communicate()
    assert qemu_io.returncode == 0 and "e2 e1 f5 e0" in out.decode()  # the EROFS superblock magic

    again = await cache.acquire_files([ws], dax=False)
    assert again == [paths[1]] and cache.file_refcount(ws.digest, dax=False) == 2
    await cache.release_files([ws], dax=False)
    await cache.release_files([base, ws], dax=False)
    assert cache.file_refcount(base.digest, dax=False) == cache.file_refcount(ws.digest, dax=False) == 0

    # A layer image-service does not have: nothing stays held.
    bogus = EnvironmentLayer(kind="base", name="bogus", version="1", digest="sha256:" + "0" * 64, size=1)
    with pytest.raises(ImageUnavailable):
        await cache.acquire_files([base, bogus], dax=False)
    assert cache.file_refcount(base.digest, dax=False) == 0


def _dump_stats(image: str) -> str:
    return subprocess.run(["dump.erofs", "-S", image], check=True, capture_output=True, text=True).stdout


async def test_dax_variant_is_an_uncompressed_padded_copy_built_once(images, new_cache, work_dir):
    base = images["base"]
    digest = base.digest
    cache = new_cache()
    # Four sandboxes at once: one conversion, one file, four references.
    paths = await asyncio.gather(*(cache.acquire_files([base], dax=True) for _ in range(4)))
    path = cache.files.dax_path(digest)
    assert paths == [[path]] * 4
    assert cache.files.dax_builds == 1 and cache.file_refcount(digest, dax=True) == 4

    st = os.stat(path)
    assert st.st_size % DAX_ALIGN == 0 and stat.S_IMODE(st.st_mode) == 0o444
    assert "compressed files:            0" in _dump_stats(path)
    assert re.search(r"compressed files:\s+[1-9]", _dump_stats(cache.store.source_path(digest)))  # the source is
    fsck = subprocess.run(["fsck.erofs", path], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    # -Enoinline_data: even a tiny file's data is in its own block (layout 0, flat plain).
    small = subprocess.run(["dump.erofs", "--path=/etc/group", path], check=True, capture_output=True,
                           text=True).stdout
    assert re.search(r"Layout: 0\b", small), small

    # Same tree, same content, ownership, modes, xattrs and hard links as the layer.
    (src_mnt,) = await cache.acquire([base])
    dax_mnt = tempfile.mkdtemp(prefix="dax-mnt-", dir=work_dir)
    mounts.mount_erofs(path, dax_mnt)
    try:
        src_facts, dax_facts = await asyncio.to_thread(_tree_facts, src_mnt), _tree_facts(dax_mnt)
        assert dax_facts == src_facts
        assert src_facts["opt/data/owned"][1:3] == (1234, 5678)
        assert dict(src_facts["opt/data/suid"][6])["security.capability"]
    finally:
        mounts.umount(dax_mnt)
        await cache.release([base])

    for _ in range(4):
        await cache.release_files([base], dax=True)
    assert cache.file_refcount(digest, dax=True) == 0
    await cache.aclose()

    # An agent restart trusts the finished variant (sidecar): no second conversion.
    inode = os.stat(path).st_ino
    cache = new_cache()
    cache.cleanup_orphans()
    assert await cache.acquire_files([base], dax=True) == [path]
    assert cache.files.dax_builds == 0 and os.stat(path).st_ino == inode
    # Held: pruning keeps it. Released: pruning removes it and the next use rebuilds it.
    assert cache.prune_files() == 0 and os.path.exists(path)
    await cache.release_files([base], dax=True)
    size = os.stat(path).st_size
    assert cache.prune_files() == size
    assert not os.path.exists(path) and not os.path.exists(sidecar_path(path))
    # A variant whose sidecar does not match is not trusted: rebuilt.
    await cache.acquire_files([base], dax=True)
    await cache.release_files([base], dax=True)
    with open(sidecar_path(path), "w") as fh:  # noqa: ASYNC230
        fh.write('{"source_digest": "%s", "size": 1, "format": "erofs-uncompressed-noinline-2m"}' % digest)
    await cache.acquire_files([base], dax=True)
    assert cache.files.dax_builds == 2
    await cache.release_files([base], dax=True)


async def test_disk_image_download_refcount_and_overlay(images, new_cache, work_dir):
    disk = images["disk"]
    cache = new_cache()
    (path, fmt), (path2, fmt2) = await asyncio.gather(cache.acquire_disk_image("desktop"),
                                                      cache.acquire_disk_image("desktop:1"))
    assert path == path2 == cache.disks.path(disk["digest"]) and fmt == fmt2 == "qcow2"
    assert cache.disk_refcount(disk["digest"]) == 2
    assert _sha256_file(path) == disk["digest"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o444
    assert [n for n in os.listdir(cache.disks.dir) if n != os.path.basename(path)] == []  # no .part left

    # What the VM backend does: a per-sandbox overlay takes every write; the cache stays as it was.
    overlay = f"{tempfile.mkdtemp(dir=work_dir)}/overlay.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", path, "-F", fmt, overlay], check=True)
    subprocess.run(["qemu-io", "-f", "qcow2", "-c", "write -P 0x41 0 64k", overlay], check=True,
                   capture_output=True)
    read = subprocess.run(["qemu-io", "-f", "qcow2", "-c", "read -P 0x41 0 64k", overlay], check=True,
                          capture_output=True, text=True)
    assert "Pattern verification failed" not in read.stdout
    assert _sha256_file(path) == disk["digest"]

    await cache.release_disk_image("desktop")
    assert cache.disk_refcount(disk["digest"]) == 1
    assert cache.prune_files() == 0 and os.path.exists(path)  # still held
    await cache.release_disk_image("desktop:1")
    await cache.release_disk_image("desktop:1")  # one too many: ignored
    assert cache.disk_refcount(disk["digest"]) == 0

    for name in ("nope", "desktop:9", "desktop:"):
        with pytest.raises(DiskImageNotFound) as exc:
            await cache.acquire_disk_image(name)
        assert isinstance(exc.value, ImageUnavailable)
    assert cache.disk_refcount(disk["digest"]) == 0
    await cache.aclose()

    # Kept across restarts: the next agent uses the same file, no download.
    inode = os.stat(path).st_ino
    cache = new_cache()
    assert (await cache.acquire_disk_image("desktop"))[0] == path and os.stat(path).st_ino == inode
    await cache.release_disk_image("desktop")
    assert cache.prune_files() > 0 and not os.path.exists(path)
