"""Node-wide mounts that every container binds instead of mounting a filesystem of its own.

Why: every superblock registers a memcg-aware shrinker, and the kernel (mm/shrinker.c) gives
every memory cgroup one 1 KiB block per 64 shrinker ids: with N sandboxes of s superblocks
each, N x sN/64 KiB of unreclaimable kernel memory (9 GB at 7,000 sandboxes with s = 11).
Binding a shared mount costs a mount, not a superblock. What is shared is read-only and
holds nothing of any sandbox:

- ``empty``: a read-only empty tmpfs, bound over each masked directory (isolation/procfs.py)
  where crun would mount a tmpfs per directory per sandbox. It reads as empty, as before;
  its root is the bind's root, so /proc/self/mountinfo shows no host path.
- ``init``: the node's container init (setting ``container_init``), copied into a read-only
  tmpfs of its own and bound from there at /dev/init (oci.py): a bind of the host file
  would show its host path in every sandbox's /proc/self/mountinfo; this one shows
  ``/init``. Copied when the agent mounts these (an upgraded host binary is taken by the
  next agent; running sandboxes keep the copy they started with).
- ``sysfs``: a read-only sysfs mounted in a network namespace of its own that holds only a
  ``lo`` (up, as in a sandbox's own: corral_host/netns.py), kept alive as the file ``netns`` (a sysfs alone does not: the namespace
  would end, and its ``lo`` with it, once the thread that made it ends): /sys as a sandbox without a network sees it anyway, for the sandboxes
  whose own namespace is just that (egress "none"). A sysfs mount in a sandbox's fresh
  namespace would be a superblock per sandbox (sysfs has one per network namespace). A
  sandbox with an allowlist keeps a sysfs of its own: its interfaces are real.

They live in the agent's private mount namespace (corral_host.namespaces.enter_private_mount_namespace), so
they go with the agent; running containers keep their binds (their own namespaces hold
them), and a restarted agent mounts a fresh pair.
"""

import os
import threading
from dataclasses import dataclass

from corral_host import mounts, netns
from corral_host.netns import loopback_up_here
from corral_node_agent.isolation import procfs


@dataclass(frozen=True)
class SharedMounts:
    empty: str  # root of the read-only empty tmpfs
    init: str  # the container init's copy, in a read-only tmpfs
    sysfs: str  # root of the blank network namespace's sysfs
    netns: str  # that namespace, bound to a file
    masked_dirs: tuple[str, ...]  # procfs.MASKED_PATHS that are directories on this kernel

    @classmethod
    def mount(cls, directory: str, init_binary: str) -> "SharedMounts":
        """Mount them under ``directory`` (made if missing; what a previous agent left mounted
        there in this namespace is taken down first)."""
        os.makedirs(directory, mode=0o755, exist_ok=True)
        mounts.umount_tree(directory)
        shared = cls(empty=f"{directory}/empty", init=f"{directory}/init/init", sysfs=f"{directory}/sysfs",
                     netns=f"{directory}/netns", masked_dirs=procfs.masked_directories())
        for path in (shared.empty, os.path.dirname(shared.init), shared.sysfs):
            os.makedirs(path, mode=0o555, exist_ok=True)
        mounts.mount_empty_readonly(shared.empty)
        try:
            mounts.mount_copy_readonly(init_binary, os.path.dirname(shared.init), os.path.basename(shared.init))
            _in_blank_network_namespace(lambda: (netns.bind(shared.netns), loopback_up_here(),
                                                 mounts.mount_sysfs(shared.sysfs)))
        except BaseException:
            shared.unmount()
            raise
        return shared

    def unmount(self) -> None:
        for path in (self.empty, os.path.dirname(self.init), self.sysfs):
            mounts.umount(path)
        netns.unbind(self.netns)


def _in_blank_network_namespace(fn) -> None:
    """``fn()`` on a fresh thread moved into a new network namespace; the thread then ends."""
    failure: list[BaseException] = []

    def body() -> None:
        try:
            netns.unshare()
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=body, name="blank-netns", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
