"""Real-crun fixtures. Needs root, crun, mkfs.erofs and a static busybox.

The private mount namespace is entered here, at import time, because unshare(CLONE_NEWNS)
only works while the process is single-threaded (before any fixture or plugin starts one).
"""

import os
import select
import shutil
import signal
import subprocess
import tempfile
import uuid

import pytest

from tests.sandbox_host import container_skip_reason

SKIP_REASON = container_skip_reason()


def pytest_collection_modifyitems(config, items):
    if not SKIP_REASON:
        return
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


def build_busybox_rootfs(root: str) -> None:
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "tmp", "home/user", "root"):
        os.makedirs(f"{root}/{d}", exist_ok=True)
    shutil.copy2(shutil.which("busybox"), f"{root}/bin/busybox")
    subprocess.run(["chroot", root, "/bin/busybox", "--install", "-s"], check=True)
    os.chmod(f"{root}/tmp", 0o1777)
    os.chown(f"{root}/home/user", 1000, 1000)
    with open(f"{root}/etc/passwd", "w") as fh:
        fh.write("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n")
    with open(f"{root}/etc/group", "w") as fh:
        fh.write("root:x:0:\nuser:x:1000:\n")


# Several pytest sessions may run at once on one host (and cgroups are host-wide), so node
# ids carry a per-session suffix and nothing lives under pytest's basetemp, which a
# concurrent session prunes (rmdir of a mount point in another namespace unmounts it there).
SESSION = uuid.uuid4().hex[:8]


@pytest.fixture(scope="session")
def work_dir():
    if SKIP_REASON:
        pytest.skip(SKIP_REASON)
    from corral_host import mounts

    path = tempfile.mkdtemp(prefix=f"corral-node-itest-{SESSION}-")
    yield path
    mounts.umount_tree(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def state_dir(work_dir) -> str:
    return f"{work_dir}/state-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def layer_caches(state_dir):
    """``layer_caches(image_service_url, transport=None, **settings)``: a LayerCache on this
    test's state dir (lazy, 1 GiB chunk cache, 5 s fetch deadline, no prefetch unless told),
    like one run of an agent. Every cache made is closed after the test, newest first (as
    agents run one after another), and nothing may stay mounted under the state dir."""
    from corral_host import mounts
    from corral_node_agent.layers import LayerCache
    from corral_node_agent.settings import LayerSettings

    made: list[LayerCache] = []

    def make(image_service_url: str, *, transport=None, **settings) -> LayerCache:
        settings = {"mode": "lazy", "cache_mb": 1024, "fetch_deadline_s": 5.0, "prefetch": False, **settings}
        made.append(LayerCache(LayerSettings(state_dir=state_dir, image_service_url=image_service_url, **settings),
                               transport=transport))
        return made[-1]

    yield make
    servers = {cache.lazy.server.pid for cache in made} - {None}
    for cache in reversed(made):
        await cache.aclose()
    assert [m for m in mounts.mountpoints() if m.startswith(state_dir)] == []
    # A lazy-layer server exits by itself once no agent is connected and nothing is mounted.
    lingering = []
    for pid in servers:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        if not select.select([fd], [], [], 15)[0]:
            os.kill(pid, signal.SIGKILL)
            lingering.append(pid)
        os.close(fd)
    assert lingering == [], "lazy-layer servers did not exit"


@pytest.fixture(scope="session")
def node_id() -> str:
    return f"itest-{SESSION}"


@pytest.fixture(scope="session")
def erofs_image(work_dir) -> str:
    build_busybox_rootfs(f"{work_dir}/root")
    image = f"{work_dir}/base.erofs"
    subprocess.run(["mkfs.erofs", "-zlz4hc", image, f"{work_dir}/root"], check=True, capture_output=True)
    return image


@pytest.fixture(scope="session")
def base_layer(erofs_image, work_dir):
    from corral_host import mounts

    mnt = f"{work_dir}/base-mnt"
    os.mkdir(mnt)
    mounts.mount_erofs(erofs_image, mnt)
    yield mnt
    mounts.umount(mnt)
