"""QEMU sandboxes: `microvm` (minimal machine, direct kernel boot) and `vm` (q35 with a display).

Work in progress (issue 4): the lead fills this in; the classes and constructors are the
interface the node-agent wiring uses.
"""

from ...settings import NodeAgentSettings
from ..base import SandboxBackend


class QemuBackend(SandboxBackend):
    kind = "microvm"
    layer_format = "files"

    def __init__(self, settings: NodeAgentSettings):
        self.settings = settings


class MicroVmBackend(QemuBackend):
    kind = "microvm"
    layer_format = "files"


class FullVmBackend(QemuBackend):
    kind = "vm"
    layer_format = "dax_files"


def qemu_available(settings: NodeAgentSettings) -> bool:
    import shutil

    return shutil.which(settings.qemu) is not None
