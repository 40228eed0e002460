"""microVM fixtures: the guest kit and a busybox base layer (needs root, qemu-system-x86_64,
mkfs.erofs; the guest kit is built once per machine by `python -m corral_node_agent guestkit
build`, here when missing)."""

import os
import subprocess

import pytest

from corral_image_service.builders.busybox import build_busybox
from corral_node_agent.backends.vm.qemu import PMEM_ALIGN
from corral_node_agent.settings import NodeAgentSettings


@pytest.fixture(scope="session")
def guestkit_dir():
    from corral_node_agent.backends.vm import guestkit

    directory = NodeAgentSettings().guestkit_dir
    guestkit.build(directory)
    return directory


@pytest.fixture(scope="session")
def layers(work_dir):
    """A busybox base layer twice: lz4hc-compressed (virtio-blk) and DAX-ready (pmem)."""
    root = f"{work_dir}/vm-rootfs"
    build_busybox(root)
    with open(f"{root}/etc/corral-layer", "w") as fh:
        fh.write("busybox-base\n")
    blk = f"{work_dir}/vm-base.erofs"
    dax = f"{work_dir}/vm-base-dax.erofs"
    subprocess.run(["mkfs.erofs", "-zlz4hc", blk, root], check=True, capture_output=True)
    subprocess.run(["mkfs.erofs", "-Enoinline_data", dax, root], check=True, capture_output=True)
    size = os.path.getsize(dax)
    os.truncate(dax, -(-size // PMEM_ALIGN) * PMEM_ALIGN)
    return {"blk": blk, "dax": dax}
