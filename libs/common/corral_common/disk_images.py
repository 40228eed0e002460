"""Inspect a user-supplied VM disk image (qcow2 or raw) before QEMU on a node may open it.

A qcow2 file can name other files: a backing file (``backing-filename``) or an external
data file (``data-file``). QEMU on the node would open those paths on the host, so an
uploaded image naming ``/etc/shadow`` would hand a host file to the guest. Such images are
refused; users flatten them first (``qemu-img convert -O qcow2 IN OUT``).

``qemu-img info`` opens only the image itself (it never follows a backing or data file), and
it probes the format instead of trusting the declared one, so a "raw" upload whose bytes
are really a qcow2 (and would be read as one by anything that probes) is refused too.

Used by image-service at upload and by the node after download (defense in depth: the node
is where QEMU runs).
"""

import json
import subprocess
from dataclasses import dataclass

DISK_IMAGE_FORMATS = ("qcow2", "raw")
QEMU_IMG_TIMEOUT_S = 60.0


class DiskImageRefused(ValueError):
    """The file is not an acceptable disk image; ``code`` names why (for API errors)."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class DiskImageInfo:
    format: str
    virtual_size: int


def inspect_disk_image(path: str, declared_format: str, *, qemu_img: str = "qemu-img") -> DiskImageInfo:
    """Check ``path`` is a self-contained image of ``declared_format``. Blocking."""
    if declared_format not in DISK_IMAGE_FORMATS:
        raise DiskImageRefused(f"format must be one of {', '.join(DISK_IMAGE_FORMATS)}", "invalid_disk_format")
    try:
        proc = subprocess.run([qemu_img, "info", "--output=json", path], capture_output=True, text=True,
                              timeout=QEMU_IMG_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise DiskImageRefused(f"qemu-img info took longer than {QEMU_IMG_TIMEOUT_S:.0f} s", "invalid_disk_image") from exc
    if proc.returncode != 0:
        why = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        raise DiskImageRefused(f"not a readable disk image: {why}", "invalid_disk_image")
    try:
        info = json.loads(proc.stdout)
        probed, virtual_size = str(info["format"]), int(info["virtual-size"])
    except (ValueError, KeyError, TypeError) as exc:
        raise DiskImageRefused(f"unexpected qemu-img info output: {exc}", "invalid_disk_image") from exc
    if probed != declared_format:
        raise DiskImageRefused(f"declared format {declared_format} but the image is {probed}", "disk_format_mismatch")
    backing = info.get("backing-filename") or info.get("full-backing-filename")
    if backing:
        raise DiskImageRefused(
            f"qcow2 images with a backing file are refused (backing file {backing!r} would be opened on "
            f"the host): flatten it first with `qemu-img convert -O qcow2 IN OUT`", "disk_image_backing_file")
    specific = (info.get("format-specific") or {}).get("data") or {}
    if specific.get("data-file"):
        raise DiskImageRefused(
            f"qcow2 images with an external data file are refused (data file {specific['data-file']!r} would "
            f"be opened on the host): convert it first with `qemu-img convert -O qcow2 IN OUT`",
            "disk_image_data_file")
    if specific.get("encrypt") or info.get("encrypted"):
        raise DiskImageRefused("encrypted images are not supported", "disk_image_encrypted")
    if specific.get("corrupt"):
        raise DiskImageRefused("the qcow2 image is marked corrupt: repair it with `qemu-img check -r all`",
                               "invalid_disk_image")
    return DiskImageInfo(format=probed, virtual_size=virtual_size)
