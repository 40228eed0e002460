"""The backends the contract runs against, each with a busybox root filesystem.

The container backend needs real crun (root, and the private mount namespace, entered here
at import time: see tests/sandbox_host.py); the microvm backend needs QEMU and a built guest
kit (it is not built here: `python -m corral_node_agent guestkit build`). Either skips,
saying why, where the host lacks them; the shipped FakeBackend always runs.
"""

import os
import shutil
import subprocess
import tempfile
import uuid

import pytest

from tests.sandbox_host import container_skip_reason

CONTAINER_SKIP = container_skip_reason()


@pytest.fixture(scope="session")
def contract_dir():
    # Not under pytest's basetemp, which a concurrent session prunes (an rmdir of a mount point
    # in another namespace unmounts it there).
    path = tempfile.mkdtemp(prefix=f"corral-contract-{uuid.uuid4().hex[:8]}-")
    yield path
    if not CONTAINER_SKIP:
        from corral_host import mounts

        mounts.umount_tree(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def busybox_erofs(contract_dir) -> str:
    """One busybox layer (image-service's own builder), as an EROFS image file."""
    if shutil.which("mkfs.erofs") is None:
        pytest.skip("needs mkfs.erofs")
    from corral_image_service.builders.busybox import build_busybox

    root = f"{contract_dir}/rootfs"
    build_busybox(root)
    image = f"{contract_dir}/busybox.erofs"
    subprocess.run(["mkfs.erofs", "-zlz4hc", image, root], check=True, capture_output=True)
    return image


@pytest.fixture(scope="session")
def busybox_mount(contract_dir, busybox_erofs) -> str:
    """The same layer mounted, as containers take it."""
    if CONTAINER_SKIP:
        pytest.skip(CONTAINER_SKIP)
    from corral_host import mounts

    mnt = f"{contract_dir}/busybox-mnt"
    os.mkdir(mnt)
    mounts.mount_erofs(busybox_erofs, mnt)
    yield mnt
    mounts.umount(mnt)
