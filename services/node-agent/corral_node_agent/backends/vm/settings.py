"""The VM backends' settings (microvm / vm), nested in the node's as ``vm``."""

from typing import Literal

from pydantic import Field

from corral_common.contracts.sandboxes import DEFAULT_VM_MEMORY_OVERHEAD_MB
from corral_node_agent.section import NodeSection, env_names


class VmSettings(NodeSection):
    section = "vm"

    # The QEMU system emulator the VM backends run.
    qemu: str = Field("qemu-system-x86_64", validation_alias=env_names("vm", "qemu", flat="qemu"))
    # Kernel + initramfs built by `python -m corral_node_agent guestkit build`.
    guestkit_dir: str = Field("/var/cache/corral/guestkit",
                              validation_alias=env_names("vm", "guestkit_dir", flat="guestkit_dir"))
    # "auto" uses KVM only where it is real hardware virtualisation (not kvm_pvm), else TCG.
    accelerator: Literal["auto", "kvm", "tcg"] = Field("auto", validation_alias=env_names("vm", "accelerator"))
    # Host memory a VM costs beyond its guest RAM (QEMU itself ~35 MiB, TCG's translation
    # cache up to 64 MiB): a 256 MiB guest that fills its RAM peaked at 346 MiB under TCG.
    memory_overhead_mb: int = Field(DEFAULT_VM_MEMORY_OVERHEAD_MB,
                                    validation_alias=env_names("vm", "memory_overhead_mb"))
    # Boot to a guest agent that answers (TCG boots take ~2-3 s on an idle core).
    boot_timeout_s: float = Field(90.0, validation_alias=env_names("vm", "boot_timeout_s"))
    # A guest whose agent misses two pings in a row is ended as guest_unresponsive.
    watchdog_interval_s: float = Field(10.0, validation_alias=env_names("vm", "watchdog_interval_s"))
    watchdog_timeout_s: float = Field(20.0, validation_alias=env_names("vm", "watchdog_timeout_s"))
