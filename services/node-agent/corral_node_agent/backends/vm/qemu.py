"""QEMU command lines for Corral's two VM kinds, and which accelerator this host really has.

Kept free of any sandbox logic so the benchmarks can boot the very same machine without
Corral (bench/vm_backends.py compares the two).
"""

import math
import os
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

Machine = Literal["microvm", "q35"]
Accelerator = Literal["kvm", "tcg"]

# DAX maps whole 2 MiB pages: a pmem backing file's size must be a multiple of this.
PMEM_ALIGN = 2 * 1024 * 1024
BALLOON_ID = "balloon0"
# TCG's translated-code buffer (MiB). Every page of it a VM has written stays resident for the
# VM's life (QEMU gives none back, not even when it flushes the buffer), and a microVM's boot
# alone writes ~50 MiB of it: under TCG the buffer is an idle VM's biggest cost after its guest
# RAM. 32 keeps boot to first exec within noise of 64 (2.6-2.9 s here); 16 costs ~+0.4 s and 8
# doubles it (the boot's code no longer fits and is translated again after each flush).
TCG_TB_SIZE_MB = 32


def detect_accelerator(preference: str = "auto") -> Accelerator:
    """KVM only where it is real hardware virtualisation.

    Some hosts expose /dev/kvm through kvm_pvm (paravirtualised KVM inside a VM), on which
    stock guest kernels hang at boot; there, and where the CPU has neither vmx nor svm, use
    TCG (slow, but it boots)."""
    if preference in ("kvm", "tcg"):
        return preference  # type: ignore[return-value]
    if not os.path.exists("/dev/kvm") or not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    if os.path.exists("/sys/module/kvm_pvm"):
        return "tcg"
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((line for line in fh if line.startswith("flags")), "")
    except OSError:
        return "tcg"
    return "kvm" if (" vmx" in flags or " svm" in flags) else "tcg"


class LayerDevice(StrEnum):
    """The device a layer image is attached as (saved in VM records and snapshots: keep the values)."""

    # virtio-pmem mapped from the host file (DAX: one page-cache copy for all VMs).
    pmem = "pmem"
    # A read-only virtio-blk disk.
    blk = "blk"


@dataclass
class LayerDisk:
    """One read-only EROFS layer image handed to the guest."""

    path: str
    transport: LayerDevice = LayerDevice.blk

    def __post_init__(self) -> None:
        self.transport = LayerDevice(self.transport)  # read back from JSON as a plain string


@dataclass
class MachineConfig:
    machine: Machine
    memory_mb: int
    cpus: int
    accelerator: Accelerator
    qmp_socket: str
    console_socket: str
    # Direct kernel boot of the guest kit (layers mode)...
    kernel: str | None = None
    initramfs: str | None = None
    cmdline: str = ""
    agent_socket: str | None = None
    layers: list[LayerDisk] = field(default_factory=list)  # base first
    # The sandbox's writable disk (an ext4 image of disk_mb, disks/upper.py), a
    # read-write virtio-blk disk with serial UPPER_SERIAL; None: the guest's upper is a tmpfs.
    upper_disk: str | None = None
    # ...or firmware boot of a whole disk (q35 only).
    boot_disk: str | None = None
    boot_disk_format: str = "qcow2"
    display: bool = False
    balloon: bool = True
    # Restore from a saved state: "defer" (state given later over QMP).
    incoming: str | None = None
    # QEMU's own seccomp filter. `spawn=deny` forbids exec: snapshots use fd: migration.
    sandbox: bool = True
    # TCG's code buffer in MiB (TCG_TB_SIZE_MB); None: QEMU's own default (1 GiB, as much as
    # the guest's code fills). Unused under KVM.
    tcg_tb_size_mb: int | None = TCG_TB_SIZE_MB
    # "uid:gid" QEMU switches to once its devices are open: a guest that escapes into QEMU
    # lands in an unprivileged user of its own, not root, and not another VM's user.
    run_as: str | None = None
    # An egress allowlist's NIC: the fd of a tap inside the sandbox's network namespace
    # (network/egress.py `tap`), which QemuMachine passes on; None: no network device at all.
    net_fd: int | None = None
    extra: list[str] = field(default_factory=list)


UPPER_SERIAL = "upper"
# The upper disk reaches QEMU as two open files of an fd set (read-write and read-only: the
# fd numbers QemuMachine.launch passes), not as a path: QEMU reopens a writable disk around
# a snapshot, when it has long dropped to a uid that may not be able to walk down to it.
UPPER_FDSET = 1


def layer_serial(index: int) -> str:
    """Serial number of layer disk #index (base = 0); the guest's init finds disks by it."""
    return f"l{index}"


def guest_lowers(layers: list[LayerDisk]) -> list[str]:
    """The `corral.lowers=` entries the guest's init understands, base first."""
    out: list[str] = []
    pmem = 0
    for i, layer in enumerate(layers):
        if layer.transport is LayerDevice.pmem:
            out.append(f"pmem{pmem}")
            pmem += 1
        else:
            out.append(f"vd:{layer_serial(i)}")
    return out


def _round_up(value: int, align: int) -> int:
    return int(math.ceil(value / align) * align)


def build_argv(qemu: str, cfg: MachineConfig, *, upper_fds: tuple[int, int] = (3, 4)) -> list[str]:
    """QEMU's command line; ``upper_fds``: the upper disk opened read-write and read-only, as
    QEMU inherits them."""
    microvm = cfg.machine == "microvm"
    bus = "device" if microvm else "pci"
    argv = [qemu, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"]
    if microvm:
        # rtc=on: without it ~20% of TCG boots hang in timer calibration (HOST-NOTES).
        argv += ["-M", "microvm,rtc=on,isa-serial=on,x-option-roms=off",
                 # Modern (v2) virtio-mmio: fewer trapped register accesses while probing
                 # devices, ~0.2 s less QEMU CPU per boot under TCG.
                 "-global", "virtio-mmio.force-legacy=false"]
    else:
        argv += ["-M", "q35"]
    if cfg.accelerator == "kvm":
        argv += ["-accel", "kvm", "-cpu", "host"]
    else:
        tb_size = f",tb-size={cfg.tcg_tb_size_mb}" if cfg.tcg_tb_size_mb else ""
        argv += ["-accel", f"tcg{tb_size}", "-cpu", "max"]

    pmem = [layer for layer in cfg.layers if layer.transport is LayerDevice.pmem]
    if pmem and microvm:
        raise ValueError("virtio-pmem needs the q35 machine (QEMU's microvm has no hotplug memory slots)")
    pmem_sizes = [_round_up(os.path.getsize(layer.path), PMEM_ALIGN) for layer in pmem]
    if pmem:
        maxmem = cfg.memory_mb * 1024 * 1024 + sum(pmem_sizes)
        argv += ["-m", f"{cfg.memory_mb}M,slots={len(pmem)},maxmem={_round_up(maxmem, PMEM_ALIGN) // 1024 // 1024}M"]
    else:
        argv += ["-m", f"{cfg.memory_mb}M"]
    argv += ["-smp", str(max(1, cfg.cpus))]
    argv += ["-qmp", f"unix:{cfg.qmp_socket},server=on,wait=off"]
    argv += ["-chardev", f"socket,id=console,path={cfg.console_socket},server=on,wait=off",
             "-serial", "chardev:console"]
    if cfg.sandbox:
        # -runas needs setuid() after the filter is in place; once it has run, the process
        # holds no privilege to elevate back to (and spawn=deny forbids exec'ing setuid files).
        elevate = "allow" if cfg.run_as else "deny"
        argv += ["-sandbox", f"on,obsolete=deny,elevateprivileges={elevate},spawn=deny,resourcecontrol=deny"]
    if cfg.run_as:
        argv += ["-runas", cfg.run_as]

    if cfg.kernel:
        argv += ["-kernel", cfg.kernel, "-append", cfg.cmdline]
        if cfg.initramfs:
            argv += ["-initrd", cfg.initramfs]
    if cfg.agent_socket:
        argv += ["-device", f"virtio-serial-{bus}",
                 "-chardev", f"socket,id=agent,path={cfg.agent_socket},server=on,wait=off",
                 "-device", "virtserialport,chardev=agent,name=corral.agent"]
    if cfg.net_fd is not None:
        argv += ["-netdev", f"tap,id=net0,fd={cfg.net_fd}", "-device", f"virtio-net-{bus},netdev=net0"]
    pmem_index = 0
    for i, layer in enumerate(cfg.layers):
        if layer.transport is LayerDevice.pmem:
            size = pmem_sizes[pmem_index]
            argv += ["-object", f"memory-backend-file,id=pm{pmem_index},share=on,readonly=on,"
                                f"mem-path={layer.path},size={size}",
                     "-device", f"virtio-pmem-pci,memdev=pm{pmem_index},id=pmem{pmem_index}"]
            pmem_index += 1
        else:
            argv += ["-drive", f"file={layer.path},format=raw,readonly=on,if=none,id=l{i}",
                     "-device", f"virtio-blk-{bus},drive=l{i},serial={layer_serial(i)}"]
    if cfg.upper_disk:
        # Direct I/O: the guest caches its own pages; the host's page cache would be a second copy.
        # No image locks: the image is this VM's alone, and QEMU's own locks on the two files
        # of the fd set would conflict when it reactivates the disk after a snapshot.
        argv += [*(a for fd in upper_fds for a in ("-add-fd", f"fd={fd},set={UPPER_FDSET}")),
                 "-drive", f"file=/dev/fdset/{UPPER_FDSET},format=raw,if=none,id=upper,cache.direct=on,discard=ignore,"
                 "file.locking=off",
                 "-device", f"virtio-blk-{bus},drive=upper,serial={UPPER_SERIAL}"]
    if cfg.boot_disk:
        if microvm:
            raise ValueError("booting a disk image needs the q35 machine")
        # AHCI rather than virtio: user images (Android-x86, desktop installs) may lack virtio drivers.
        argv += ["-drive", f"file={cfg.boot_disk},format={cfg.boot_disk_format},if=none,id=disk0",
                 "-device", "ide-hd,drive=disk0,bus=ide.0,bootindex=0"]
    if cfg.display:
        argv += ["-vga", "std", "-device", "virtio-tablet-pci"]
    if cfg.balloon:
        # id: the memory-manager's guest stats are read at /machine/peripheral/<id> (QOM).
        argv += ["-device", f"virtio-balloon-{bus},id={BALLOON_ID},deflate-on-oom=on,free-page-reporting=on"]
    if cfg.incoming:
        argv += ["-incoming", cfg.incoming]
    return argv + list(cfg.extra)
