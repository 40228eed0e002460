"""Who sandboxed code runs as, inside the sandbox and on the host.

No runtime uses a user namespace mapping of its own yet, so the ids are chosen in three ways:
- containers: the node's ``sandbox_user`` (default 1000:1000), the same ids inside and on
  the host; an exec as ``root`` is host root with `ROOT_CAPABILITIES` (and no others);
- fncall runs: uid/gid 1000 inside bwrap's user namespace, ``nobody`` (65534) on the host;
- VMs: every QEMU drops to a host uid of its own (`VmUidPool`): a guest that escapes into
  QEMU lands in an unprivileged user that is neither root nor another VM's.
"""

import zlib
from dataclasses import dataclass

from corral_node_agent.settings import NodeAgentSettings

# What a `user: root` exec gets in a container (docker-like, minus anything touching the
# host); the sandbox user gets none.
ROOT_CAPABILITIES = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
    "CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE",
)
NOBODY = 65534
VM_UID_SLOTS = 10_000


@dataclass(frozen=True)
class Identity:
    uid: int  # the sandbox user, as the sandbox sees it
    gid: int
    # The same processes as the host sees them; None: a uid of its own per sandbox, from the
    # node's pool (VMs: `VmUidPool`).
    host_uid: int | None
    host_gid: int | None
    root_capabilities: tuple[str, ...] = ()  # what an exec as root keeps (containers)


FNCALL_IDENTITY = Identity(uid=1000, gid=1000, host_uid=NOBODY, host_gid=NOBODY)
# The guest agent runs commands as 1000:1000 inside the guest (guest/agent.c).
VM_IDENTITY = Identity(uid=1000, gid=1000, host_uid=None, host_gid=None)


def container_identity(settings: NodeAgentSettings) -> Identity:
    uid, gid = settings.sandbox_uid, settings.sandbox_gid
    return Identity(uid=uid, gid=gid, host_uid=uid, host_gid=gid, root_capabilities=ROOT_CAPABILITIES)


class VmUidPool:
    """Host uids for QEMU processes: ``vm_uid_base`` + a slot, one slot per running VM.

    A base of 0 derives one from the node id, so two agents on one host do not share uids;
    -1 keeps QEMU as root (no slots are handed out)."""

    def __init__(self, settings: NodeAgentSettings):
        base = settings.vm_uid_base
        if base == 0:
            base = 2_000_000 + (zlib.crc32(settings.node_id.encode()) % 1000) * VM_UID_SLOTS
        self.base = base
        self.enabled = settings.vm_uid_base >= 0
        self._free = list(range(VM_UID_SLOTS - 1, -1, -1))

    def acquire(self) -> int | None:
        """A free slot, lowest first (None: QEMU stays root, disabled or all slots taken)."""
        return self._free.pop() if self.enabled and self._free else None

    def claim(self, slot: int) -> None:
        """Take the slot a VM adopted from a previous agent run already uses."""
        if slot in self._free:
            self._free.remove(slot)

    def release(self, slot: int) -> None:
        self._free.append(slot)

    def uid(self, slot: int) -> int:
        return self.base + slot
