"""The MachineConfig of a new VM: its sockets, its layers (attached by format), its writable
upper disk and the guest kit's kernel command line, or a user disk image behind a per-sandbox
qcow2 overlay. A restored VM's config comes from its snapshot instead (snapshots.py)."""

import asyncio
import os
import subprocess
from typing import Any

from corral_common.contracts.sandboxes import SandboxSpec
from corral_node_agent.backends.types import BootDisk, ImageTransport, LayerFormat, RootFs
from corral_node_agent.backends.vm.guestkit import GuestKit, kernel_cmdline
from corral_node_agent.backends.vm.qemu import (
    UPPER_SERIAL,
    Accelerator,
    LayerDevice,
    LayerDisk,
    Machine,
    MachineConfig,
    guest_lowers,
)
from corral_node_agent.disks.upper import UpperDisks
from corral_node_agent.errors import StartFailed
from corral_node_agent.isolation.quota import disk_quota

UPPER_FILE = "upper.img"
OVERLAY_FILE = "disk.qcow2"
# How a layer in each format is attached, and what the record then says (vm: until the
# guest tells whether DAX worked).
LAYER_ATTACHMENT = {LayerFormat.files: (LayerDevice.blk, ImageTransport.virtio_blk),
                    LayerFormat.dax_files: (LayerDevice.pmem, ImageTransport.virtio_pmem_dax)}


def sockets(directory: str) -> dict[str, str]:
    """QMP, serial console and guest agent sockets, in the VM's own directory."""
    return {name: os.path.join(directory, f"{name}.sock") for name in ("qmp", "console", "agent")}


def common_config(machine: Machine, spec: SandboxSpec, accelerator: Accelerator,
                  socks: dict[str, str]) -> dict[str, Any]:
    """The MachineConfig keywords every new VM has, whatever it boots."""
    return dict(machine=machine, memory_mb=spec.memory_mb, cpus=max(1, round(spec.cpu)),
                accelerator=accelerator, qmp_socket=socks["qmp"], console_socket=socks["console"],
                display=machine == "q35")


async def disk_image_config(common: dict[str, Any], disk: BootDisk | None, directory: str,
                            qemu_img: str = "qemu-img") -> tuple[MachineConfig, ImageTransport]:
    """Firmware boot of a user disk image: writes land in a per-sandbox overlay; the cached
    image is shared and never written."""
    if disk is None:
        raise StartFailed("no disk image was given to boot")
    overlay = os.path.join(directory, OVERLAY_FILE)
    await create_overlay(qemu_img, disk, overlay)
    return MachineConfig(**common, boot_disk=overlay, boot_disk_format="qcow2"), ImageTransport.disk_image


async def create_overlay(qemu_img: str, disk: BootDisk, overlay: str) -> None:
    """``qemu-img create`` of a qcow2 overlay backed by ``disk``, without blocking the loop
    (other creates and every exec of the node wait on it otherwise). Fails as
    ``subprocess.run(check=True)`` would: CalledProcessError with its output."""
    argv = [qemu_img, "create", "-q", "-f", "qcow2", "-b", disk.path, "-F", disk.format, overlay]
    proc = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE)
    stdout, stderr = await proc.communicate()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, argv, stdout, stderr)


async def layers_config(common: dict[str, Any], sandbox_id: str, spec: SandboxSpec, rootfs: RootFs,
                        directory: str, socks: dict[str, str], *, layer_format: LayerFormat, guestkit_dir: str,
                        disks: UpperDisks, net: tuple[str, str] | None) -> tuple[MachineConfig, ImageTransport]:
    """Direct kernel boot of the guest kit, whose init stacks the layers under the upper disk."""
    kit = GuestKit.load(guestkit_dir)
    device, transport = LAYER_ATTACHMENT[layer_format]
    layers = [LayerDisk(path=p, transport=device) for p in reversed(rootfs.layers)]  # base first
    # Copying the disk's template (made the first time a size is asked for) is file I/O: in a thread.
    upper = (await asyncio.to_thread(disks.make, os.path.join(directory, UPPER_FILE), disk_quota(spec))).image
    cmdline = kernel_cmdline(lowers=guest_lowers(layers), upper_disk=UPPER_SERIAL, net=net,
                             hostname=sandbox_id, tty_shell=common["machine"] == "q35",
                             tcg=common["accelerator"] == "tcg")
    # The raw vmlinux (PVH entry, faster) skips the real-mode setup that finds the VGA
    # text console: a machine with a screen boots the bzImage.
    kernel = kit.display_kernel if common["display"] and kit.display_kernel else kit.kernel
    config = MachineConfig(**common, kernel=kernel, initramfs=kit.initramfs, cmdline=cmdline,
                           agent_socket=socks["agent"], layers=layers, upper_disk=upper)
    return config, transport
