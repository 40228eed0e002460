"""Builders of default base root filesystems (a directory, later turned into a layer)."""

from corral_image_service.builders.busybox import build_busybox
from corral_image_service.builders.debian import build_debian

BUILDERS = {"busybox": build_busybox, "debian": build_debian}

__all__ = ["BUILDERS", "build_busybox", "build_debian"]
