"""QEMU sandboxes: `microvm` (minimal machine, direct kernel boot) and `vm` (q35 with a display).

Work in progress (issue 4): the lead fills this in; the classes and constructors are the
interface the node-agent wiring uses.
"""

from corral_common.sandboxes import Usage

from ...settings import NodeAgentSettings
from ..base import SandboxBackend, Unsupported


class QemuBackend(SandboxBackend):
    kind = "microvm"
    layer_format = "files"

    def __init__(self, settings: NodeAgentSettings):
        self.settings = settings

    async def start(self, sandbox_id, spec, lower_dirs):
        raise Unsupported("VM sandboxes are not implemented yet")

    async def stop(self, sandbox_id):
        return Usage()

    async def exec(self, sandbox_id, req):
        raise Unsupported("VM sandboxes are not implemented yet")

    def exec_stream(self, sandbox_id, req):
        raise Unsupported("VM sandboxes are not implemented yet")

    async def write_file(self, sandbox_id, path, data, mode=0o644):
        raise Unsupported("VM sandboxes are not implemented yet")

    async def read_file(self, sandbox_id, path):
        raise Unsupported("VM sandboxes are not implemented yet")

    async def open_file(self, sandbox_id, path):
        raise Unsupported("VM sandboxes are not implemented yet")

    async def stat(self, sandbox_id, path):
        raise Unsupported("VM sandboxes are not implemented yet")

    async def list_dir(self, sandbox_id, path):
        raise Unsupported("VM sandboxes are not implemented yet")

    def usage(self, sandbox_id):
        return Usage()

    def list_running(self):
        return []


class MicroVmBackend(QemuBackend):
    kind = "microvm"
    layer_format = "files"


class FullVmBackend(QemuBackend):
    kind = "vm"
    layer_format = "dax_files"


def qemu_available(settings: NodeAgentSettings) -> bool:
    import shutil

    return shutil.which(settings.qemu) is not None
