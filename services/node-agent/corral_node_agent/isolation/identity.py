"""Who sandboxed code runs as, inside the sandbox and on the host: a decision per kind.

- containers: a user namespace of their own per sandbox. Each sandbox gets 65,536 host
  uids/gids (`IdRange`, from the node's `UidRanges`: uids.py) mapped to 0..65535 inside: root
  inside is the range's base on the host, the sandbox user (``sandbox_user``, default 1000) is
  base + 1000, and no two live sandboxes share a host id, so per-uid kernel state (user
  keyrings, inotify instances, RLIMIT_NPROC, mqueue bytes) is per sandbox. An exec as
  ``root`` is root of that namespace with `ROOT_CAPABILITIES`, which count only there.
  ``container_uid_base: -1`` turns this off (every sandbox is host ``sandbox_user``, root is
  host root: the old behaviour, kept for kernels without idmapped layers and for benchmarks).
- fncall runs: uid/gid 1000 inside bwrap's user namespace, ``nobody`` (65534) on the host;
- VMs: every QEMU drops to a host uid of its own (`VmUidPool`, uids.py): a guest that escapes
  into QEMU lands in an unprivileged user that is neither root nor another VM's.

The mechanisms live with the resources they manage: the ranges and the VM uids in uids.py,
the user namespace itself in corral_host/userns.py.
"""

from dataclasses import dataclass

from corral_host.userns import IdRange
from corral_node_agent.settings import NodeAgentSettings

# What a `user: root` exec gets in a container (docker-like, minus anything touching the
# host); the sandbox user gets none.
ROOT_CAPABILITIES = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
    "CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE",
)
NOBODY = 65534


@dataclass(frozen=True)
class Identity:
    uid: int  # the sandbox user, as the sandbox sees it
    gid: int
    # The same processes as the host sees them; None: a uid of its own per sandbox, from the
    # node's pool (VMs: `VmUidPool`).
    host_uid: int | None
    host_gid: int | None
    root_capabilities: tuple[str, ...] = ()  # what an exec as root keeps (containers)
    # Containers: the user namespace's mapping (None: no user namespace, host ids as above).
    ids: IdRange | None = None

    @property
    def host_root(self) -> tuple[int, int]:
        """Root of the sandbox as the host sees it (host root without a user namespace)."""
        return (self.ids.host_base,) * 2 if self.ids else (0, 0)


FNCALL_IDENTITY = Identity(uid=1000, gid=1000, host_uid=NOBODY, host_gid=NOBODY)
# The guest agent runs commands as 1000:1000 inside the guest (guest/agent.c).
VM_IDENTITY = Identity(uid=1000, gid=1000, host_uid=None, host_gid=None)


def container_identity(settings: NodeAgentSettings, ids: IdRange | None = None, run_as: str | None = None) -> Identity:
    """The sandbox user: ``run_as`` ("uid[:gid]", an image's User) inside a user namespace of
    its own, where any id of the range is only the range's; without one (host ids) always
    the node's sandbox uid, never an id a caller picked (0 would be host root)."""
    uid, gid = settings.isolation.sandbox_uid, settings.isolation.sandbox_gid
    if ids is not None and run_as:
        parts = [int(part) for part in run_as.split(":")]
        if all(0 <= part < ids.size for part in parts):
            uid = parts[0]
            gid = parts[1] if len(parts) > 1 else parts[0]
    if ids is None:
        return Identity(uid=uid, gid=gid, host_uid=uid, host_gid=gid, root_capabilities=ROOT_CAPABILITIES)
    return Identity(uid=uid, gid=gid, host_uid=ids.host(uid), host_gid=ids.host(gid),
                    root_capabilities=ROOT_CAPABILITIES, ids=ids)
