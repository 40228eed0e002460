"""Values that cross the backend port: what a sandbox's root filesystem is made of.

The manager acquires layers in the form the backend's ``layer_format`` asks for and hands
them over as one ``RootFs``; a backend never sees images or the image-service.
"""

from dataclasses import dataclass, field
from enum import StrEnum


class LayerFormat(StrEnum):
    """What a backend wants its layers as (``LayerCache.acquire`` or ``acquire_files``)."""

    # Mounted EROFS layer directories: containers stack them in an overlay.
    mounts = "mounts"
    # The EROFS image files: a VM attaches them as read-only disks.
    files = "files"
    # Uncompressed, 2 MiB-aligned image files a guest can map with DAX (virtio-pmem).
    dax_files = "dax_files"


class DiskFormat(StrEnum):
    """Format of a disk image a VM boots (image-service inspects and records it)."""

    qcow2 = "qcow2"
    raw = "raw"


class ImageTransport(StrEnum):
    """How the root filesystem reaches a VM's guest: a sandbox record's ``runtime["image_transport"]``
    (the values are on the wire and in saved VM records: never rename them)."""

    virtio_blk = "virtio-blk"
    # The guest mounted every layer with DAX: one host page-cache copy for all VMs.
    virtio_pmem_dax = "virtio-pmem+dax"
    # pmem without DAX (the guest's init fell back, and said so).
    virtio_pmem = "virtio-pmem"
    # A user's whole disk image, booted by firmware, behind a private qcow2 overlay.
    disk_image = "disk-image"


@dataclass(frozen=True)
class BootDisk:
    """A whole disk image to boot instead of the guest kit (only the ``vm`` backend has firmware).
    The file is the node's shared cached copy: a backend must never write it."""

    path: str
    format: DiskFormat


@dataclass(frozen=True)
class RootFs:
    """What start() builds a sandbox's root from: ``layers`` (top first) in the backend's
    ``layer_format``, and for a disk-image sandbox the ``boot_disk`` (then usually no layers)."""

    layers: list[str] = field(default_factory=list)
    boot_disk: BootDisk | None = None
