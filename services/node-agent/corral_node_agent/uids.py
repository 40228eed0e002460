"""The host ids this node hands out to sandboxes: a range of 65,536 per container
(`UidRanges`) and one uid per VM's QEMU (`VmUidPool`). Who runs as which id is decided in
isolation/identity.py; the user namespace that maps a range is corral_host/userns.py.

Ranges are claimed in a host-wide registry (``uid_registry_dir``, one file per range under a
lock), so two agents on one host never hand out the same ids, whatever their node ids; the
node id only decides where an agent starts looking. A sandbox's range is written into its
bundle's sandbox.json: a restarted agent reads it back and claims the same range again
(`UidRanges.claim`). A claim left by a crashed agent is free again once its sandbox's
directory is gone (or the host rebooted).
"""

import fcntl
import os
import time
import zlib

from corral_host.userns import RANGE_SIZE, IdRange
from corral_node_agent.errors import Unavailable
from corral_node_agent.settings import NodeAgentSettings

VM_UID_SLOTS = 10_000
# Derived container ranges: host ids [2^28, 2^31), far above VM uids (< 12,000,000) and the
# usual /etc/subuid ranges, below 2^31 (tools that keep ids signed).
DERIVED_FIRST = 1 << 28
DERIVED_RANGES = ((1 << 31) - DERIVED_FIRST) // RANGE_SIZE
# A claim whose sandbox directory does not exist yet is being created: not stale before this.
CLAIM_GRACE_S = 60.0
# How long a range seen held by another live sandbox (another agent's) is skipped without looking
# at its claim file again. Two agents' derived starts may lie close (node-1 and node-2: 390 ranges
# apart), so one agent's walk crosses the other's claims; checking each claim's file on every
# acquire made each create O(sandboxes on the host) in syscalls, on the agent's event loop and
# under the host-wide lock: at ~2,300 sandboxes per node a node-agent's heartbeat went 10 s late.
FOREIGN_RECHECK_S = 30.0


def vm_uid_base(settings: NodeAgentSettings) -> int:
    """The first QEMU uid (-1: QEMU stays root)."""
    base = settings.isolation.vm_uid_base
    if base == 0:
        base = 2_000_000 + (zlib.crc32(settings.node_id.encode()) % 1000) * VM_UID_SLOTS
    return base


class VmUidPool:
    """Host uids for QEMU processes: ``vm_uid_base`` + a slot, one slot per running VM.

    A base of 0 derives one from the node id, so two agents on one host do not share uids;
    -1 keeps QEMU as root (no slots are handed out)."""

    def __init__(self, settings: NodeAgentSettings):
        self.base = vm_uid_base(settings)
        self.enabled = settings.isolation.vm_uid_base >= 0
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


def _boot_id() -> str:
    with open("/proc/sys/kernel/random/boot_id") as fh:
        return fh.read().strip()


def id_range_count(settings: NodeAgentSettings) -> int | None:
    """How many sandboxes' id ranges the node can hand out (None: no user namespaces, no bound)."""
    base = settings.isolation.container_uid_base
    if base < 0:
        return None
    if base == 0:
        return DERIVED_RANGES
    return settings.max_sandboxes or max(0, ((1 << 32) - base) // RANGE_SIZE)


class UidRanges:
    """The node's container id ranges: `acquire` one per sandbox, `release` it on delete.

    ``container_uid_base`` > 0: ranges ``base + i * 65536`` for i < ``max_sandboxes`` (0: up to 2^32);
    0: ranges in [2^28, 2^31), this node starting at a place derived from its node id;
    -1: disabled (`enabled` False, sandboxes get no user namespace)."""

    def __init__(self, settings: NodeAgentSettings):
        base = settings.isolation.container_uid_base
        self.enabled = base >= 0
        self.node_id = settings.node_id
        if base == 0:
            self.first, self.count = DERIVED_FIRST, DERIVED_RANGES
            self.start = zlib.crc32(settings.node_id.encode()) % DERIVED_RANGES
        else:
            self.first, self.count, self.start = base, id_range_count(settings) or 0, 0
        if self.enabled:
            if settings.isolation.sandbox_uid >= RANGE_SIZE or settings.isolation.sandbox_gid >= RANGE_SIZE:
                raise ValueError(f"sandbox_user must be below {RANGE_SIZE} with user namespaces")
            vm = vm_uid_base(settings)
            if settings.isolation.vm_uid_base >= 0 and vm < self.first + self.count * RANGE_SIZE and self.first < vm + VM_UID_SLOTS:
                raise ValueError(f"container uid ranges [{self.first}, {self.first + self.count * RANGE_SIZE}) "
                                 f"overlap the VM uids [{vm}, {vm + VM_UID_SLOTS}): change container_uid_base")
            if self.first + self.count * RANGE_SIZE > 1 << 32:
                raise ValueError("container_uid_base leaves no room for max_sandboxes ranges below 2^32")
        self.registry = settings.isolation.uid_registry_dir
        self._held: dict[int, str] = {}  # host_base -> owner (the sandbox's directory)
        self._foreign: dict[int, float] = {}  # host_base -> when it was last seen held by another
        self._boot = ""

    # ---- the registry -------------------------------------------------------------------

    def _claim_path(self, host_base: int) -> str:
        return f"{self.registry}/{host_base}"

    def _locked(self):
        os.makedirs(self.registry, mode=0o700, exist_ok=True)
        fd = os.open(f"{self.registry}/.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return os.fdopen(fd, "r+")  # closing it releases the lock

    def _write_claim(self, host_base: int, owner: str, *, replace: bool) -> bool:
        """Create the claim file (False: someone else's live claim is there)."""
        path = self._claim_path(host_base)
        if not self._boot:
            self._boot = _boot_id()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            if not replace and not self._stale(path, owner):
                return False
            os.unlink(path)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{self._boot}\n{self.node_id}\n{owner}\n")
        return True

    def _stale(self, path: str, owner: str) -> bool:
        """A claim of a previous boot, or of a sandbox directory that is gone (or ours)."""
        try:
            with open(path) as fh:
                boot, _node, held_by = (fh.read().split("\n") + ["", "", ""])[:3]
            age = time.time() - os.stat(path).st_mtime
        except OSError:
            return True
        if boot != self._boot or held_by == owner:
            return True
        return not os.path.exists(held_by) and age > CLAIM_GRACE_S

    # ---- ranges -------------------------------------------------------------------------

    def acquire(self, owner: str) -> IdRange:
        """A free range for the sandbox in directory ``owner`` (Unavailable when none is)."""
        now = time.monotonic()
        with self._locked():
            for recheck in (False, True):  # a second walk looks again at every claim of another
                for k in range(self.count):
                    i = (self.start + k) % self.count
                    host_base = self.first + i * RANGE_SIZE
                    if host_base in self._held:
                        continue
                    if not recheck and now - self._foreign.get(host_base, -FOREIGN_RECHECK_S) < FOREIGN_RECHECK_S:
                        continue
                    if self._write_claim(host_base, owner, replace=False):
                        self._foreign.pop(host_base, None)
                        self._held[host_base] = owner
                        return IdRange(host_base)
                    self._foreign[host_base] = now
        raise Unavailable(f"no free uid range on this node (all {self.count} are in use)")

    def claim(self, ids: IdRange, owner: str) -> None:
        """Hold again the range an adopted sandbox runs with (its bundle says which)."""
        with self._locked():
            self._write_claim(ids.host_base, owner, replace=True)
        self._held[ids.host_base] = owner

    def release(self, ids: IdRange) -> None:
        if self._held.pop(ids.host_base, None) is None:
            return
        try:
            os.unlink(self._claim_path(ids.host_base))
        except FileNotFoundError:
            pass

    def release_unheld(self, owners_under: str) -> None:
        """Drop claims of sandbox directories below ``owners_under`` that this agent does not
        hold (a previous run's, whose sandboxes were not adopted)."""
        if not os.path.isdir(self.registry):
            return
        prefix = owners_under.rstrip("/") + "/"
        with self._locked():
            for name in os.listdir(self.registry):
                if not name.isdigit() or int(name) in self._held:
                    continue
                try:
                    with open(self._claim_path(int(name))) as fh:
                        held_by = (fh.read().split("\n") + ["", "", ""])[2]
                    if held_by.startswith(prefix):
                        os.unlink(self._claim_path(int(name)))
                except OSError:
                    continue


