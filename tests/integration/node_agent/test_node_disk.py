"""A container's disk_mb is a disk of its own (disks/upper.py), with real crun and loop devices.

Whoever writes into a sandbox, its processes or the root agent through the files API, fills
that sandbox's disk and nothing else: ENOSPC at disk_mb from inside, a 507 JSON answer
through the API, no host RAM (shmem) taken, the neighbour unaffected; the disk goes with
the sandbox, and a restarted agent keeps the quota of the sandboxes it adopts.
"""

import asyncio
import os
import sys
import uuid
from types import SimpleNamespace

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec
from corral_host import loopdev, mounts
from corral_node_agent.backends.container import ContainerBackend, bundle
from corral_node_agent.backends.types import RootFs
from corral_node_agent.errors import DiskFull
from corral_node_agent.http_errors import install_node_error_handlers
from corral_node_agent.layers import LayerCache
from corral_node_agent.sandboxes.router import router
from corral_node_agent.sandboxes.service import SandboxManager
from corral_node_agent.settings import NodeAgentSettings
from tests.integration.node_agent.test_node_manager import image_service
from tests.polling import until

MIB = 1024 * 1024


def _settings(state_dir, node_id, **kw) -> NodeAgentSettings:
    return NodeAgentSettings(node_id=node_id, state_dir=state_dir, max_upload_bytes=1 << 30, **kw)


@pytest_asyncio.fixture
async def backend(state_dir, node_id):
    b = ContainerBackend(_settings(state_dir, node_id))
    yield b
    await b.close()


async def started(backend, base_layer, **spec) -> str:
    sid = "d-" + uuid.uuid4().hex[:10]
    spec.setdefault("memory_mb", 64)
    spec.setdefault("disk_mb", 32)
    await backend.start(sid, SandboxSpec(environment="busybox", **spec), RootFs([base_layer]))
    return sid


def sh(cmd: str, **kw) -> ExecRequest:
    kw.setdefault("timeout_s", 60)
    return ExecRequest(cmd=cmd, **kw)


def shmem_mb() -> int:
    with open("/proc/meminfo") as fh:
        return next(int(line.split()[1]) // 1024 for line in fh if line.startswith("Shmem:"))


async def disk_gone(image: str) -> None:
    """The image is deleted and no loop device holds it any more (they clear themselves)."""
    assert not os.path.exists(image)
    await until(lambda: loopdev.devices_backed_by(image) == [], timeout_s=10, what=f"the loop device of {image} to clear")


async def test_filling_from_inside_is_enospc_at_disk_mb_and_the_neighbour_still_writes(backend, base_layer):
    full = await started(backend, base_layer, disk_mb=32)
    neighbour = await started(backend, base_layer, disk_mb=32)
    r = await backend.exec(full, sh("df -k /home/user | tail -1"))
    assert 32 * 1024 <= int(r.stdout.split()[1]) <= 40 * 1024  # the disk is disk_mb, not the host's
    r = await backend.exec(full, sh("dd if=/dev/zero of=/home/user/big bs=1M count=64"))
    assert r.exit_code != 0 and "No space left on device" in r.stderr
    r = await backend.exec(full, sh("ls -l /home/user/big"))
    assert 31 * MIB <= int(r.stdout.split()[4]) <= 33 * MIB  # all of disk_mb was usable
    # As root too (a tmpfs would have grown on to min(disk_mb, memory_mb); root gets no reserve).
    r = await backend.exec(full, sh("dd if=/dev/zero of=/root/more bs=1M count=8", user="root"))
    assert r.exit_code != 0 and "No space left on device" in r.stderr
    r = await backend.exec(neighbour, sh("dd if=/dev/zero of=/home/user/mine bs=1M count=24 && echo ok"))
    assert r.exit_code == 0 and r.stdout.strip().endswith("ok")
    # The full one is still healthy, and has room again once it deletes.
    r = await backend.exec(full, sh("rm /home/user/big && dd if=/dev/zero of=/home/user/again bs=1M count=16 && echo ok"))
    assert r.exit_code == 0 and r.stdout.strip().endswith("ok")


async def test_memory_mb_does_not_cap_disk_mb(backend, base_layer):
    """64 MiB of memory, 512 MiB written: page cache, reclaimed under the sandbox's own memory
    limit, never shmem (the tmpfs upper OOM-killed this at 64 MiB)."""
    sid = await started(backend, base_layer, memory_mb=64, disk_mb=600)
    before = shmem_mb()
    r = await backend.exec(sid, sh("dd if=/dev/zero of=/home/user/big bs=1M count=512 && sync && echo ok",
                                   timeout_s=120))
    assert r.exit_code == 0 and r.stdout.strip().endswith("ok"), r.stderr
    assert not r.oom_killed and backend.usage(sid).oom_kills == 0
    assert shmem_mb() - before < 128
    r = await backend.exec(sid, sh("ls -l /home/user/big"))
    assert int(r.stdout.split()[4]) == 512 * MIB


@pytest_asyncio.fixture
async def node(state_dir, node_id, erofs_image):
    """A node's HTTP data path (router + manager + real container backend)."""
    with open(erofs_image, "rb") as fh:
        blob = fh.read()
    settings = _settings(state_dir, f"{node_id}-disk", internal_token="s3cret", image_service_url="http://image-service")
    manager = SandboxManager(ContainerBackend(settings),
                             LayerCache(settings.layers(), transport=image_service(blob, [])))
    await manager.start()
    app = FastAPI()
    install_node_error_handlers(app)
    app.include_router(router)
    app.state.services, app.state.settings = SimpleNamespace(manager=manager), settings
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node",
                               headers={"X-Corral-Internal-Token": "s3cret"}, timeout=120)
    yield manager, client
    await client.aclose()
    await manager.close()


async def test_an_upload_that_does_not_fit_is_a_507_and_leaves_nothing(node):
    manager, client = node
    await manager.create("up1", SandboxSpec(environment="busybox", memory_mb=64, disk_mb=64))
    await manager.create("up2", SandboxSpec(environment="busybox", memory_mb=64, disk_mb=64))
    image = bundle.disk_image(f"{manager.backend.sandboxes_dir}/up1")

    async def body(total_mb: int):
        for _ in range(total_mb):
            yield b"\0" * MIB

    before = shmem_mb()
    r = await client.put("/v1/sandboxes/up1/files", params={"path": "huge.bin"}, content=body(256))
    assert r.status_code == 507, r.text
    error = r.json()["error"]
    assert error["code"] == "disk_full" and "disk_mb" in error["message"]
    assert error["details"][0]["loc"] == ["body"]
    # The agent wrote 64 MiB as root into the sandbox: none of it went to host RAM as shmem.
    assert shmem_mb() - before < 48
    r = await client.get("/v1/sandboxes/up1/files", params={"path": "huge.bin"})
    assert r.status_code == 404  # no partial file
    # What fits still fits, in it and in its neighbour; the sandbox runs on.
    for sid in ("up1", "up2"):
        r = await client.put(f"/v1/sandboxes/{sid}/files", params={"path": "fits.bin"}, content=body(48))
        assert r.status_code == 200 and r.json()["size"] == 48 * MIB, r.text
    r = await client.post("/v1/sandboxes/up1/exec", json={"cmd": "ls -l fits.bin"})
    assert r.status_code == 200 and r.json()["stdout"].split()[4] == str(48 * MIB)
    # Full again: a second upload, and a new directory, are refused the same way.
    r = await client.put("/v1/sandboxes/up1/files", params={"path": "d/e/more.bin"}, content=body(32))
    assert r.status_code == 507 and r.json()["error"]["code"] == "disk_full"
    await manager.delete("up1")
    await disk_gone(image)
    await manager.delete("up2")


async def test_the_disk_goes_with_the_sandbox(backend, base_layer):
    sid = await started(backend, base_layer, disk_mb=48)
    directory = f"{backend.sandboxes_dir}/{sid}"
    image = bundle.disk_image(directory)
    meta = bundle.read_meta(directory)
    assert meta.disk is not None and meta.disk.image == image and meta.disk.size_mb == 48
    (device,) = loopdev.devices_backed_by(image)
    # Thin (the default): the image takes host space as it is written, not its size up front.
    assert os.stat(image).st_blocks * 512 < 48 * MIB
    await backend.exec(sid, sh("dd if=/dev/zero of=/home/user/f bs=1M count=40"))
    await backend.stop(sid)
    assert not os.path.exists(directory)
    assert not any(m.startswith(directory) for m in mounts.mountpoints())
    await disk_gone(image)
    # Cleared itself: free, or already reused for another image (the pool refills meanwhile).
    assert (loopdev.backing_file(device) or "").removesuffix(" (deleted)") != image


PREVIOUS_AGENT = """
import asyncio, sys
from corral_common.contracts.sandboxes import SandboxSpec
from corral_host import loopdev, mounts, namespaces
from corral_node_agent.backends.container import ContainerBackend
from corral_node_agent.backends.types import RootFs
from corral_node_agent.settings import NodeAgentSettings

async def main(state_dir, node_id, sid, erofs):
    backend = ContainerBackend(NodeAgentSettings(node_id=node_id, state_dir=state_dir))
    mounts.mount_erofs(erofs, state_dir + "/base")
    await backend.start(sid, SandboxSpec(environment="busybox", memory_mb=64, disk_mb=32), RootFs([state_dir + "/base"]))
    await backend.write_file(sid, "/home/user/before.bin", b"x" * (8 << 20))
    print("READY", flush=True)
    await asyncio.sleep(3600)

namespaces.enter_private_mount_namespace()
asyncio.run(main(*sys.argv[1:]))
"""


async def _previous_agent(state_dir: str, node_id: str, sid: str, erofs_image: str) -> None:
    """Start a sandbox from another agent process, then SIGKILL that agent (its mount
    namespace, with the disk's mount in it, goes; the container and its overlay stay)."""
    os.makedirs(f"{state_dir}/base", exist_ok=True)
    previous = await asyncio.create_subprocess_exec(sys.executable, "-c", PREVIOUS_AGENT, state_dir, node_id, sid,
                                                    erofs_image, stdout=asyncio.subprocess.PIPE)
    try:
        line = b""
        while line.strip() != b"READY":  # its log lines come first
            line = await asyncio.wait_for(previous.stdout.readline(), 60)
            assert line, "the previous agent exited before it was ready"
    finally:
        previous.kill()
        await previous.wait()


async def test_a_restarted_agent_keeps_the_quota_of_the_sandboxes_it_adopts(state_dir, node_id, erofs_image):
    sid = "ad-" + uuid.uuid4().hex[:8]
    await _previous_agent(state_dir, node_id, sid, erofs_image)
    backend = ContainerBackend(_settings(state_dir, node_id))
    image = bundle.disk_image(f"{backend.sandboxes_dir}/{sid}")
    try:
        assert await backend.cleanup_orphans(adopt=True) == [sid]
        assert bundle.read_meta(f"{backend.sandboxes_dir}/{sid}").disk.size_mb == 32
        assert len(loopdev.devices_backed_by(image)) == 1  # still the sandbox's own disk
        assert len(await backend.read_file(sid, "before.bin")) == 8 * MIB
        r = await backend.exec(sid, sh("dd if=/dev/zero of=/home/user/big bs=1M count=64"))
        assert r.exit_code != 0 and "No space left on device" in r.stderr
        with pytest.raises(DiskFull):
            await backend.write_file(sid, "more.bin", b"y" * (4 << 20))
        r = await backend.exec(sid, sh("rm big && echo room > after.txt && cat after.txt"))
        assert r.stdout == "room\n"
    finally:
        await backend.stop(sid)
    await disk_gone(image)
    await backend.close()


async def test_cleanup_removes_the_disks_a_previous_agent_left(state_dir, node_id, erofs_image):
    sid = "cl-" + uuid.uuid4().hex[:8]
    await _previous_agent(state_dir, node_id, sid, erofs_image)
    backend = ContainerBackend(_settings(state_dir, node_id))
    image = bundle.disk_image(f"{backend.sandboxes_dir}/{sid}")
    assert os.path.exists(image)
    assert await backend.cleanup_orphans(adopt=False) == []
    await disk_gone(image)
    await backend.close()


@pytest.mark.parametrize("size_mb", [16, 100, 1024])
def test_a_disk_has_disk_mb_free_and_its_size_is_formatted_once(state_dir, size_mb):
    from corral_node_agent.disks.upper import TOLERANCE, UpperDisks
    from corral_node_agent.isolation.quota import DiskQuota

    disks = UpperDisks(f"{state_dir}/disks")
    os.makedirs(f"{state_dir}/a")
    disks.mount(f"{state_dir}/a.img", f"{state_dir}/a", DiskQuota(size_mb * MIB))
    try:
        st = os.statvfs(f"{state_dir}/a")
        assert size_mb * MIB <= st.f_bavail * st.f_frsize <= size_mb * MIB + TOLERANCE
    finally:
        mounts.umount(f"{state_dir}/a")
    (template,) = os.listdir(disks.templates)
    made = os.stat(f"{disks.templates}/{template}").st_ino
    disks.make(f"{state_dir}/b.img", DiskQuota(size_mb * MIB))
    assert os.listdir(disks.templates) == [template] and os.stat(f"{disks.templates}/{template}").st_ino == made
    assert os.path.getsize(f"{state_dir}/b.img") == os.path.getsize(f"{state_dir}/a.img")


def test_discard_shuts_down_only_the_disk_it_is_given(state_dir):
    """discard() stops writeback with an ext4 shutdown: it must hit the named disk's own
    filesystem and nothing else mounted (or not) at the path."""
    from corral_node_agent.disks.upper import UpperDisks
    from corral_node_agent.isolation.quota import DiskQuota

    disks = UpperDisks(f"{state_dir}/disks")
    for name in ("mine", "other", "tmp"):
        os.makedirs(f"{state_dir}/{name}")
    disks.mount(f"{state_dir}/mine.img", f"{state_dir}/mine", DiskQuota(16 * MIB))
    disks.mount(f"{state_dir}/other.img", f"{state_dir}/other", DiskQuota(16 * MIB))
    mounts.mount_tmpfs(f"{state_dir}/tmp", 16)
    try:
        disks.discard(f"{state_dir}/other", f"{state_dir}/mine.img")  # not its disk
        disks.discard(f"{state_dir}/tmp", f"{state_dir}/mine.img")  # not a disk
        for name in ("other", "tmp"):
            with open(f"{state_dir}/{name}/f", "wb") as fh:
                fh.write(b"still writable")
        disks.discard(f"{state_dir}/mine", f"{state_dir}/mine.img")
        with pytest.raises(OSError):
            with open(f"{state_dir}/mine/f", "wb") as fh:
                fh.write(b"shut down")
    finally:
        for name in ("mine", "other", "tmp"):
            mounts.umount(f"{state_dir}/{name}")


async def test_disks_are_kept_ready_for_recent_sizes_and_removed_with_the_backend(state_dir, node_id, base_layer):
    from corral_node_agent.disks.upper import POOL_SIZES

    backend = ContainerBackend(_settings(state_dir, node_id, disk_pool=2))
    pool = backend.disks.pool

    def ready(size_mb: int) -> list[str]:
        with pool._lock:
            return [d.image for d in pool._ready.get(size_mb, [])]

    def staged_mounts() -> list[str]:
        return [m for m in mounts.mountpoints() if m.startswith(pool.directory)]

    first = await started(backend, base_layer, disk_mb=40)  # made on the spot; 40 MiB is kept ready from now on
    await until(lambda: len(ready(40)) == 2, timeout_s=30, what="two ready 40 MiB disks")
    taken = ready(40)[-1]
    second = await started(backend, base_layer, disk_mb=40)
    assert not os.path.exists(taken)  # moved into the sandbox's directory...
    image = bundle.disk_image(f"{backend.sandboxes_dir}/{second}")
    assert loopdev.devices_backed_by(image)
    r = await backend.exec(second, sh("dd if=/dev/zero of=/home/user/big bs=1M count=64"))
    assert r.exit_code != 0 and "No space left on device" in r.stderr  # ...and it is a 40 MiB disk like any
    await until(lambda: len(ready(40)) == 2, timeout_s=30, what="the pool to refill")
    # Sizes asked for longer ago than the POOL_SIZES most recent ones are not kept ready.
    others = [await started(backend, base_layer, disk_mb=16 + i) for i in range(POOL_SIZES)]
    await until(lambda: ready(40) == [], timeout_s=30, what="40 MiB to leave the pool")
    for sid in [first, second, *others]:
        await backend.stop(sid)
    await until(lambda: len(ready(16)) == 2, timeout_s=30, what="ready 16 MiB disks")
    assert len(staged_mounts()) >= 2
    await backend.close()
    assert staged_mounts() == [] and not os.path.exists(pool.directory)
    assert not [m for m in mounts.mountpoints() if m.startswith(state_dir)]


def test_a_new_agent_run_removes_the_ready_disks_a_previous_one_left(state_dir, node_id):
    from corral_node_agent.disks.upper import UpperDisks

    pool_dir = f"{state_dir}/upper-disks/pool"
    os.makedirs(f"{pool_dir}/7")
    with open(f"{pool_dir}/7.img", "wb") as fh:
        fh.truncate(16 * MIB)
    ContainerBackend(_settings(state_dir, node_id))
    assert not os.path.exists(pool_dir)
    UpperDisks(f"{state_dir}/upper-disks")  # the VM backend's (no pool) leaves a pool alone
    os.makedirs(pool_dir)
    UpperDisks(f"{state_dir}/upper-disks", pool=0)
    assert os.path.isdir(pool_dir)
