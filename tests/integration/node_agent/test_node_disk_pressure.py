"""Thin disks on a host that runs short (disks/pressure.py), with real crun and loop devices.

The node's state dir is on a small filesystem of the test's own, smaller than one sandbox's
disk_mb: a sandbox that writes as fast as it can gets ENOSPC from its own disk (never an I/O
error), the host's filesystem keeps at least the hard watermark free, a neighbour still runs
and writes within what is left, and once the writer deletes its file writes work again.
"""

import asyncio
import os
import subprocess
import threading
import uuid

import pytest
import pytest_asyncio

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec
from corral_host import loopdev, mounts
from corral_node_agent.backends.container import ContainerBackend
from corral_node_agent.backends.types import RootFs
from corral_node_agent.capacity import disk
from corral_node_agent.disks.pressure import DiskPressure
from corral_node_agent.settings import NodeAgentSettings
from tests.polling import until

MIB = 1024 * 1024
HOST_MB = 768  # the node's filesystem; a sandbox's disk_mb (the default, 1024) is more
RESERVE_MB = 320  # the watermark: below it the running sandboxes share what is left above
HARD_MB = disk.hard_reserve_mb(RESERVE_MB)  # ... this, which the host always keeps


@pytest.fixture
def small_host(work_dir):
    """A HOST_MB ext4 filesystem, loop-mounted, for the node's state dir."""
    name = uuid.uuid4().hex[:8]
    image, mountpoint = f"{work_dir}/host-{name}.img", f"{work_dir}/host-{name}"
    with open(image, "wb") as fh:
        fh.truncate(HOST_MB * MIB)
    subprocess.run(["mkfs.ext4", "-q", "-F", image], check=True, capture_output=True)
    os.mkdir(mountpoint)
    device, fd = loopdev.attach(image)
    try:
        mounts.mount_ext4(device, mountpoint)
    finally:
        os.close(fd)
    yield mountpoint
    mounts.umount_tree(mountpoint)
    os.unlink(image)


class FreeSpaceLow:
    """The lowest free space of a filesystem while it runs (sampled every millisecond)."""

    def __init__(self, path: str):
        self.path = path
        self.lowest = self.free()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def free(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def _run(self) -> None:
        while not self._stop.wait(0.001):
            self.lowest = min(self.lowest, self.free())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return min(self.lowest, self.free())


@pytest_asyncio.fixture
async def node(small_host, node_id):
    state_dir = f"{small_host}/state"
    settings = NodeAgentSettings(node_id=f"{node_id}-full", state_dir=state_dir, disk_free_reserve_mb=RESERVE_MB)
    backend = ContainerBackend(settings)
    pressure = DiskPressure(state_dir, RESERVE_MB, backend.open_disks, backend.disk_limit_bytes)
    task = asyncio.create_task(pressure.run_forever())
    yield backend, pressure
    task.cancel()
    await backend.close()


async def started(backend, base_layer) -> str:
    sid = "p-" + uuid.uuid4().hex[:10]
    spec = SandboxSpec(environment="busybox")  # the default spec: disk_mb 1024, more than the host has
    assert spec.disk_mb * MIB > HOST_MB * MIB
    await backend.start(sid, spec, RootFs([base_layer]))
    return sid


def sh(cmd: str) -> ExecRequest:
    return ExecRequest(cmd=cmd, timeout_s=120)


async def test_a_writer_past_the_watermark_gets_enospc_and_the_host_keeps_the_hard_watermark(node, base_layer,
                                                                                           small_host):
    backend, pressure = node
    writer = await started(backend, base_layer)
    neighbour = await started(backend, base_layer)
    free = FreeSpaceLow(small_host)
    try:
        r = await backend.exec(writer, sh("dd if=/dev/zero of=/home/user/big bs=1M; sync"))
    finally:
        lowest = free.stop()
    print(f"dd: {r.stderr!r}; the host's lowest free space {lowest // MIB} MiB")
    # ENOSPC from the sandbox's own filesystem, not the loop device's I/O errors.
    assert "No space left on device" in r.stderr, r.stderr
    assert "I/O error" not in r.stderr and "Input/output" not in r.stderr, r.stderr
    written = int((await backend.exec(writer, sh("stat -c %s /home/user/big"))).stdout)
    assert written > 128 * MIB  # it wrote until the host ran short, not less
    assert lowest >= HARD_MB * MIB, f"the host's free space fell to {lowest // MIB} MiB (hard watermark {HARD_MB})"
    assert pressure.restricting()

    # The node serves: the neighbour answers and writes within what is left above the hard watermark.
    r = await backend.exec(neighbour, sh("dd if=/dev/zero of=/home/user/mine bs=1M count=2 && sync && echo ok"))
    assert r.exit_code == 0 and r.stdout.strip().endswith("ok"), r.stderr
    assert free.free() >= HARD_MB * MIB

    # The writer deletes its file: the host gets the blocks back (trimmed), and writes work again.
    r = await backend.exec(writer, sh("rm /home/user/big && echo ok"))
    assert r.exit_code == 0, r.stderr

    async def writes_again() -> bool:
        r = await backend.exec(writer, sh("dd if=/dev/zero of=/home/user/again bs=1M count=64 && sync && echo ok"))
        return r.exit_code == 0 and r.stdout.strip().endswith("ok")

    await until(writes_again, timeout_s=30, what="the writer's writes to work again", interval_s=0.3)
    assert free.free() >= HARD_MB * MIB
