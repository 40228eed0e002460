"""Builders of default base root filesystems (a directory, later turned into a layer)."""

from corral_image_service.builders.busybox import build_busybox
from corral_image_service.builders.debian import build_debian
from corral_image_service.builders.judge import build_judge

# judge: the fncall runtimes' base (Debian + python3, gcc, g++), registered as environment "judge".
BUILDERS = {"busybox": build_busybox, "debian": build_debian, "judge": build_judge}

__all__ = ["BUILDERS", "build_busybox", "build_debian", "build_judge"]
