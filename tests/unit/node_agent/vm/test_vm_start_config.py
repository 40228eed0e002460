"""A VM's start builds its machine config without blocking the node-agent's event loop: the
qcow2 overlay of a user disk image is made by a qemu-img child the loop awaits (every other
create and exec of the node would wait on a blocking one)."""

import asyncio
import os
import stat
import subprocess
import time

import pytest

from corral_common.contracts.sandboxes import SandboxSpec
from corral_node_agent.backends.types import BootDisk, DiskFormat, RootFs
from corral_node_agent.backends.vm.backend import FullVmBackend
from corral_node_agent.settings import NodeAgentSettings

SLOW_S = 0.6


def _fake_qemu_img(bin_dir, body: str) -> None:
    path = bin_dir / "qemu-img"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def backend(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return FullVmBackend(NodeAgentSettings(node_id="n1", state_dir=str(tmp_path / "state"), vm_accelerator="tcg"))


def _disk_spec(tmp_path):
    base = tmp_path / "base.qcow2"
    base.write_bytes(b"")
    directory = tmp_path / "vm"
    directory.mkdir()
    spec = SandboxSpec(disk_image="img-1", backend="vm")
    return spec, RootFs(layers=[], boot_disk=BootDisk(path=str(base), format=DiskFormat("qcow2"))), str(directory)


async def test_the_overlay_of_a_disk_image_is_made_without_blocking_the_loop(backend, tmp_path):
    # qemu-img takes SLOW_S; a ticker on the same loop must keep ticking meanwhile.
    _fake_qemu_img(tmp_path / "bin", f'sleep {SLOW_S}\nfor a; do last="$a"; done\n: > "$last"\n')
    spec, rootfs, directory = _disk_spec(tmp_path)
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.02)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    started = time.monotonic()
    config, _ = await backend._config("sb-1", spec, rootfs, directory)
    elapsed = time.monotonic() - started
    task.cancel()
    assert elapsed >= SLOW_S
    assert config.boot_disk == os.path.join(directory, "disk.qcow2") and os.path.exists(config.boot_disk)
    during = [t for t in ticks if started < t < started + elapsed]
    assert len(during) >= 10, f"the loop ticked {len(during)} times in {elapsed:.2f} s of qemu-img"


async def test_a_failing_qemu_img_fails_the_start_with_its_command(backend, tmp_path):
    _fake_qemu_img(tmp_path / "bin", "echo 'backing file not found' >&2\nexit 1\n")
    spec, rootfs, directory = _disk_spec(tmp_path)
    with pytest.raises(subprocess.CalledProcessError) as err:
        await backend._config("sb-1", spec, rootfs, directory)
    assert err.value.returncode == 1 and err.value.cmd[:2] == ["qemu-img", "create"]
    assert b"backing file not found" in err.value.stderr
