"""Sandboxes as crun containers: lifecycle, exit watching, adoption.

One container per sandbox, its bundle in {state_dir}/sandboxes/<id>/ (bundle.py has the
layout), its state in the node's own crun root (crun.py). Commands go through
``crun exec`` (exec.py); files are read and written host-side in the merged rootfs (files.py).

A running sandbox's disk and overlay are mounted in no namespace of the agent: they are built
in the agent's namespace, crun copies them into the container's, and then the agent keeps only
a descriptor of each (bundle.detach). Each ``crun run`` copies the agent's mount namespace, so
mounts kept there would make every create slower the more sandboxes the node runs.

The agent must run in its own mount namespace (corral_host.namespaces.enter_private_mount_namespace): crun
needs a hybrid host's cgroup2 mount hidden, and these mounts must not leak onto the host.

Each sandbox has a user namespace of its own (corral_host/userns.py): its host id range is
taken from the node's `UidRanges` before the bundle is built, written into sandbox.json,
claimed again by a restarted agent that adopts the sandbox, and released when the sandbox
is deleted. crun's container process is root of that namespace, an unprivileged host uid:
crun enters the bundle dir as host root and the container process then opens `rootfs`
relative to it, so only the sandbox's own dir must be searchable by it (group: the range's
root, bundle.py); the state dir and its parents stay closed to other host users.
"""

import asyncio
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Collection, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field

from corral_common.contracts.exec import ExecChunk, ExecRequest, ExecResult, FileInfo
from corral_common.contracts.network import NetworkPolicy
from corral_common.contracts.sandboxes import RuntimeInfo, SandboxSpec, Usage
from corral_common.logging import get_logger
from corral_host import mounts, netns, uts
from corral_host.cgroups import node as node_cgroup
from corral_host.cgroups.base import Cgroup, CgroupDriver, RunStats
from corral_host.cgroups.detect import cgroup_driver
from corral_host.userns import UserNamespace
from corral_node_agent.backends.base import Capability, ExitReason, FileData, FinishedUsage, SandboxBackend
from corral_node_agent.backends.container import bundle, files, oci
from corral_node_agent.backends.container import exec as container_exec
from corral_node_agent.backends.container.crun import Crun, CrunContainer, CrunError
from corral_node_agent.backends.container.diff import write_diff_tar
from corral_node_agent.backends.container.shared_mounts import SharedMounts
from corral_node_agent.backends.types import RootFs
from corral_node_agent.capacity import disk
from corral_node_agent.disks.pressure import OpenDisk
from corral_node_agent.disks.upper import UpperDisks
from corral_node_agent.errors import (
    AlreadyExists,
    BadInput,
    NodeAgentError,
    NotFound,
    PortClosed,
    RuntimeFailure,
    SandboxPaused,
    StartFailed,
    Unsupported,
)
from corral_node_agent.isolation.policy import SandboxPolicy, policy_for
from corral_node_agent.isolation.seccomp import SyscallFilter
from corral_node_agent.network.egress import Slot, node_egress
from corral_node_agent.settings import NodeAgentSettings
from corral_node_agent.uids import UidRanges

log = get_logger(__name__)
SANDBOX_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
# crun's niceness when it starts a container ahead for the warm pool: it yields the cpu to the
# creates and execs it is there to speed up (the claim gives the init its normal priority back).
AHEAD_NICE = 10


@dataclass
class _Sandbox:
    id: str
    spec: SandboxSpec
    dir: str
    policy: SandboxPolicy
    cgroup: Cgroup  # crun creates it (config.json cgroupsPath); the agent reads and removes it
    started: float = field(default_factory=time.monotonic)
    pid: int = 0
    pidfd: int = -1
    timer: asyncio.TimerHandle | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    stopping: bool = False
    paused: bool = False
    usage: Usage | None = None
    # Re-adopted from a previous agent run: the descriptors of its overlay and disk died
    # with that run, but the container keeps its own mount namespace, so host-side file
    # access goes through its init's root (/proc/<pid>/root).
    adopted: bool = False
    # An allowlist's network namespace (network/egress.py); None: network "none" (crun's own).
    net: Slot | None = None
    # Its overlay and disk, once detached from the agent's namespace (set when it runs).
    detached: bundle.DetachedRoot | None = None
    # Its crun container id, the name of its cgroup and of its directory: its id, unless it
    # was started ahead for the warm pool and claimed later (claim()); "" means the id.
    runtime: str = ""

    @property
    def runtime_id(self) -> str:
        return self.runtime or self.id


def _disk_used(sb: _Sandbox) -> int:
    """Bytes in use on the sandbox's disk: its own filesystem, seen through the descriptor the
    agent holds or, for an adopted one, through its init's root (an overlay reports its upper's)."""
    try:
        st = os.fstatvfs(sb.detached.disk_fd) if sb.detached is not None else os.statvfs(f"/proc/{sb.pid}/root")
    except OSError:  # not started, or already gone
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class ContainerBackend(SandboxBackend):
    capabilities = frozenset({Capability.pause, Capability.adopt, Capability.commit, Capability.ports,
                              Capability.warm_pool})

    def __init__(self, settings: NodeAgentSettings):
        self.settings = settings
        self.state_dir = os.path.abspath(settings.state_dir)
        self.crun_root = f"{self.state_dir}/crun"
        self.crun = Crun(settings.crun, self.crun_root)
        self.sandboxes_dir = f"{self.state_dir}/sandboxes"
        self.disks = UpperDisks(f"{self.state_dir}/upper-disks", preallocate=settings.disk_preallocate,
                                pool=settings.disk_pool,
                                keep_free_bytes=disk.hard_reserve_bytes(settings.disk_free_reserve_mb, self.state_dir))
        self.on_exit = None
        self._sandboxes: dict[str, _Sandbox] = {}
        self._finished = FinishedUsage()
        self._starting = 0
        self._tasks: set[asyncio.Task] = set()
        self._cg: CgroupDriver | None = None
        self._shared: SharedMounts | None = None
        self.uid_ranges = UidRanges(settings)
        self._seccomp_programs: dict[str, bytes | None] = {}
        self.egress = node_egress(settings)  # starts nothing until a sandbox has an allowlist
        os.makedirs(self.crun_root, mode=0o700, exist_ok=True)
        os.makedirs(self.sandboxes_dir, mode=0o700, exist_ok=True)

    @property
    def cgroups(self) -> CgroupDriver:
        # Read lazily: the mount namespace may be entered after construction.
        if self._cg is None:
            self._cg = cgroup_driver()
        return self._cg

    @property
    def shared_mounts(self) -> SharedMounts:
        # Mounted at the first start, in the namespace the agent runs sandboxes from.
        if self._shared is None:
            self._shared = SharedMounts.mount(f"{self.state_dir}/shared", self.settings.container_init)
        return self._shared

    def _cgroup(self, sandbox_id: str) -> Cgroup:
        return self.cgroups.cgroup(oci.cgroup_path(self.settings.node_id, sandbox_id))

    # ---- lifecycle ----------------------------------------------------------------------

    def list_running(self) -> list[str]:
        return [sid for sid, sb in self._sandboxes.items() if not sb.stopping]

    def open_disks(self) -> list[OpenDisk]:
        # On the loop, where stop() takes sb.detached (as _root_of): no descriptor is reused under us.
        disks = []
        for sb in self._sandboxes.values():
            if sb.stopping:
                continue
            try:
                if sb.detached is not None:
                    fd = os.dup(sb.detached.disk_fd)
                elif sb.adopted and sb.pid:
                    fd = os.open(f"/proc/{sb.pid}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                else:
                    continue  # still starting: the next check sees it
            except OSError:
                continue
            disks.append(OpenDisk(fd, bundle.disk_image(sb.dir)))
        return disks + self.disks.open_ready()

    def disk_limit_bytes(self) -> int:
        # An image is its disk_mb plus ext4's metadata (inode tables written as files are made).
        images = sum(sb.spec.disk_mb * 21 // 20 + 2 for sb in self._sandboxes.values())
        return images * disk.MIB + self.disks.ready_bytes()

    def runtime_id(self, sandbox_id: str) -> str:
        sb = self._sandboxes.get(sandbox_id)
        return sb.runtime_id if sb is not None else sandbox_id

    def describe(self, sandbox_id: str) -> RuntimeInfo:
        sb = self._sandboxes.get(sandbox_id)
        return {"warm_pool": sb.runtime} if sb is not None and sb.runtime else {}

    async def claim(self, started_id: str, sandbox_id: str, spec: SandboxSpec) -> None:
        """Make the running, never used sandbox ``started_id`` (started ahead with the same
        spec but for its timeout, labels and workdir: sandboxes/warm_pool.py) the sandbox
        ``sandbox_id``: its hostname, its spec, its lifetime from now, its bundle's metadata
        (a restarted agent adopts it under this id). Its crun id, cgroup and directory keep
        the name it was started with. NotFound when it is gone (ended meanwhile)."""
        if not SANDBOX_ID_RE.match(sandbox_id):
            raise BadInput(f"invalid sandbox id {sandbox_id!r}", loc=["path", "sandbox_id"])
        if sandbox_id in self._sandboxes:
            raise AlreadyExists(f"sandbox {sandbox_id} already exists")
        sb = self._get(started_id)
        async with sb.lock:
            if sb.stopping or sb.paused or sb.pidfd < 0:
                raise NotFound(f"sandbox {started_id} is not running")
            await asyncio.to_thread(uts.set_hostname, sb.pid, oci.hostname_of(sandbox_id))
            os.setpriority(os.PRIO_PROCESS, sb.pid, 0)  # started niced (AHEAD_NICE): a sandbox now
            # What can fail comes first: the caller discards a pooled sandbox whose claim failed.
            bundle.write_meta(sb.dir, spec, sb.policy.identity.ids, sandbox_id=sandbox_id)
            loop = asyncio.get_running_loop()
            loop.remove_reader(sb.pidfd)  # watched again below, under its new id
            if sb.timer is not None:
                sb.timer.cancel()
            self._sandboxes.pop(started_id, None)
            sb.runtime, sb.id, sb.spec = sb.runtime_id, sandbox_id, spec
            sb.started = time.monotonic()
            self._sandboxes[sandbox_id] = sb
            self._finished.pop(sandbox_id, None)
            loop.add_reader(sb.pidfd, self._init_exited, sandbox_id)
            sb.timer = loop.call_later(spec.timeout_s, self._timeout_fired, sandbox_id)
        log.info("sandbox.claimed", sandbox_id=sandbox_id, started_as=sb.runtime, pid=sb.pid)

    async def start(self, sandbox_id: str, spec: SandboxSpec, rootfs: RootFs) -> None:
        await self._start(sandbox_id, spec, rootfs, ahead=False)

    async def start_ahead(self, runtime_id: str, spec: SandboxSpec, rootfs: RootFs) -> None:
        """Start a sandbox for the warm pool: running, but no sandbox until claim() names it
        (a restarted agent takes it back for the pool, or deletes it: cleanup_orphans)."""
        await self._start(runtime_id, spec, rootfs, ahead=True)

    async def _start(self, sandbox_id: str, spec: SandboxSpec, rootfs: RootFs, ahead: bool) -> None:
        if not SANDBOX_ID_RE.match(sandbox_id):
            raise BadInput(f"invalid sandbox id {sandbox_id!r}", loc=["path", "sandbox_id"])
        if sandbox_id in self._sandboxes:
            raise AlreadyExists(f"sandbox {sandbox_id} already exists")
        if not rootfs.layers:
            raise StartFailed("no root filesystem layers")
        if not os.access(self.settings.container_init, os.X_OK):
            raise StartFailed(f"the node has no container init at {self.settings.container_init} "
                              "(install catatonit, or set CORRAL_NODE_CONTAINER_INIT)")
        sb_dir = f"{self.sandboxes_dir}/{sandbox_id}"
        ids = self.uid_ranges.acquire(sb_dir) if self.uid_ranges.enabled else None
        sb = _Sandbox(id=sandbox_id, spec=spec, dir=sb_dir, policy=policy_for(spec, self.settings, ids),
                      cgroup=self._cgroup(sandbox_id))
        self._sandboxes[sandbox_id] = sb
        self._finished.pop(sandbox_id, None)
        self._starting += 1
        try:
            async with sb.lock:
                try:
                    if sb.policy.egress.mode == "allowlist":
                        sb.net = await self.egress.attach(sandbox_id, sb.policy.egress.policy)
                    with self._userns(sb) as userns:
                        self._prepare_bundle(sb, rootfs.layers, userns, ahead)
                        await self._run_init(sb, nice=AHEAD_NICE if ahead else 0)
                except Exception as exc:
                    await self._teardown(sb, kill=True)
                    self._finished.pop(sandbox_id, None)
                    if isinstance(exc, NodeAgentError) and not isinstance(exc, RuntimeFailure):
                        raise  # it says what went wrong
                    raise StartFailed(f"sandbox {sandbox_id} failed to start: {exc}") from exc
        finally:
            self._starting -= 1
        loop = asyncio.get_running_loop()
        sb.timer = loop.call_later(spec.timeout_s, self._timeout_fired, sandbox_id)
        log.info("sandbox.started", sandbox_id=sandbox_id, pid=sb.pid,
                 ms=round((time.monotonic() - sb.started) * 1000, 1))

    @staticmethod
    def _userns(sb: _Sandbox) -> AbstractContextManager[UserNamespace | None]:
        """The sandbox's fresh user namespace while its root is built and crun joins it."""
        ids = sb.policy.identity.ids
        return UserNamespace(ids) if ids is not None else nullcontext()

    def _seccomp_program(self, profile: SyscallFilter) -> bytes | None:
        """The profile compiled once per agent (cached on disk by its digest), for crun to load
        as is; None: crun compiles the config's linux.seccomp itself (slower, same program)."""
        if profile.name not in self._seccomp_programs:
            program = None
            if profile.to_oci() is not None:
                try:
                    program = profile.to_bpf(f"{self.state_dir}/seccomp").read_bytes()
                except (OSError, subprocess.CalledProcessError) as exc:
                    log.warning("seccomp.precompile_failed", profile=profile.name, error=str(exc))
            self._seccomp_programs[profile.name] = program
        return self._seccomp_programs[profile.name]

    def _prepare_bundle(self, sb: _Sandbox, lower_dirs: list[str], userns: UserNamespace | None,
                        ahead: bool) -> None:
        config = oci.build_config(sb.id, sb.policy, env=sb.spec.env, node_id=self.settings.node_id,
                                  disk_root=bundle.upper_dir(sb.dir), shared=self.shared_mounts,
                                  with_swap_limit=self.cgroups.swap_limit, cgroups_path=sb.cgroup.runtime_path,
                                  seccomp_bpf=self._seccomp_program(sb.policy.syscalls),
                                  userns_path=userns and userns.path, netns_path=sb.net and sb.net.netns_path,
                                  resolv_conf=oci.disk_resolv_conf(bundle.upper_dir(sb.dir)) if sb.net else None)
        bundle.create(sb.dir, sb.spec, lower_dirs, config, disks=self.disks, quota=sb.policy.disk,
                      identity=sb.policy.identity, sandbox_id=None if ahead else sb.id,
                      userns_fd=userns and userns.fd,
                      nameserver=sb.net and sb.net.gateway)

    async def _run_init(self, sb: _Sandbox, nice: int = 0) -> None:
        try:
            await self.crun.run_detached(sb.runtime_id, sb.dir, pid_file=bundle.init_pid_file(sb.dir),
                                         log_path=bundle.run_log(sb.dir), nice=nice,
                                         timeout_s=self.settings.container_start_timeout_s)
        except CrunError as exc:
            raise StartFailed(str(exc)) from None
        sb.pid = bundle.read_init_pid(sb.dir)
        if sb.policy.limits.cpu is not None:
            # Capped only now, so crun's setup ran outside the cap (oci.build_config says why).
            try:
                sb.cgroup.cap_cpu(sb.policy.limits.cpu)
            except OSError as exc:
                raise StartFailed(f"could not cap its cpu at {sb.policy.limits.cpu} cores: {exc}") from None
        try:
            sb.pidfd = os.pidfd_open(sb.pid)
        except ProcessLookupError:
            raise StartFailed("sandbox init exited immediately") from None
        asyncio.get_running_loop().add_reader(sb.pidfd, self._init_exited, sb.id)
        # Loopback only (the namespace has no other interface): servers in the sandbox can
        # listen on 127.0.0.1, and port ingress reaches them there.
        await asyncio.to_thread(netns.loopback_up, sb.pid)
        program = self._seccomp_programs.get(sb.policy.syscalls.name)
        if program is not None and self.crun.seccomp_program(sb.runtime_id) != program:
            # (a runtime that ignored the annotation would run the sandbox unfiltered)
            raise StartFailed(f"the runtime did not take syscall profile {sb.policy.syscalls.name!r}")
        sb.detached = bundle.detach(sb.dir)

    def _unwatch(self, sb: _Sandbox) -> None:
        if sb.pidfd >= 0:
            asyncio.get_running_loop().remove_reader(sb.pidfd)
            os.close(sb.pidfd)
            sb.pidfd = -1
        if sb.timer is not None:
            sb.timer.cancel()
            sb.timer = None

    def _init_exited(self, sandbox_id: str) -> None:
        sb = self._sandboxes.get(sandbox_id)
        if sb is None:
            return
        self._unwatch(sb)
        if sb.stopping:
            return
        reason = ExitReason.oom_killed if self._oom_kills(sb) > 0 else ExitReason.exited
        self._spawn(self._end_on_own(sb, reason))

    def _timeout_fired(self, sandbox_id: str) -> None:
        sb = self._sandboxes.get(sandbox_id)
        if sb is None or sb.stopping:
            return
        sb.timer = None
        self._spawn(self._end_on_own(sb, ExitReason.timeout))

    def _spawn(self, coro) -> None:
        # Keep a reference (tasks are otherwise only weakly held) and let close() await them.
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Stop every sandbox and wait for exit handling in flight (agent shutdown)."""
        for sid in list(self._sandboxes):
            await self.stop(sid)
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self._prune_parent_cgroups()
        await asyncio.to_thread(self.disks.close)
        await self.egress.close()
        if self._shared is not None:
            self._shared.unmount()
            self._shared = None

    async def _end_on_own(self, sb: _Sandbox, reason: ExitReason) -> None:
        async with sb.lock:
            if sb.stopping:
                return  # someone called stop() meanwhile: it reports, not us
            usage = await self._teardown(sb, kill=True)
        log.info("sandbox.ended", sandbox_id=sb.id, reason=str(reason))
        await self._report_exit(sb.id, reason, usage)

    async def stop(self, sandbox_id: str) -> Usage:
        sb = self._sandboxes.get(sandbox_id)
        if sb is None:
            return self._finished.get(sandbox_id, Usage())
        async with sb.lock:
            if sb.usage is not None:
                return sb.usage
            return await self._teardown(sb, kill=True)

    async def pause(self, sandbox_id: str) -> None:
        """``crun pause``: the cgroup freezer stops every process; the timeout keeps running."""
        sb = self._get(sandbox_id)
        async with sb.lock:
            if sb.stopping or sb.paused:
                return
            await self.crun.pause(sb.runtime_id)
            sb.paused = True
            await self._settle_frozen(sb)
        log.info("sandbox.paused", sandbox_id=sandbox_id)

    async def commit_diff(self, sandbox_id: str, out_path: str) -> int:
        """The upper dir as an OCI diff tar (backends/container/diff.py), read while every
        process of the sandbox is frozen so the tar is one moment's state; thawed after
        unless it was paused already."""
        sb = self._get(sandbox_id)
        if sb.adopted:
            # Its disk is mounted in the previous agent run's namespace, which died with it.
            raise Unsupported("a sandbox re-adopted after an agent restart cannot be committed: its writable "
                              "layer is not reachable from this agent; commit it before a restart")
        ids = sb.policy.identity.ids
        async with sb.lock:
            if sb.stopping:
                raise NotFound(f"sandbox {sandbox_id} not found or not running")
            frozen_here = not sb.paused
            if frozen_here:
                await self.crun.pause(sb.runtime_id)
                await self._settle_frozen(sb)
            try:
                with self._disk_of(sb) as disk:
                    return await asyncio.to_thread(write_diff_tar, f"{disk}/upper", out_path,
                                                   ids.host_base if ids else 0, ids.size if ids else 65536)
            finally:
                if frozen_here:
                    await self.crun.resume(sb.runtime_id)

    async def _settle_frozen(self, sb: _Sandbox, timeout_s: float = 2.0) -> None:
        """On cgroup v1, `crun pause` may return while the freezer still says FREEZING (a task
        was busy); writing FROZEN again retries, as the kernel documents. Wait until it holds."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if sb.cgroup.freeze():
                    return
            except OSError:  # no freezer hierarchy, or the cgroup is gone
                return
            await asyncio.sleep(0.01)
        log.warning("sandbox.freeze_incomplete", sandbox_id=sb.id)

    async def resume(self, sandbox_id: str) -> None:
        sb = self._get(sandbox_id)
        async with sb.lock:
            if sb.stopping or not sb.paused:
                return
            await self.crun.resume(sb.runtime_id)
            sb.paused = False
        log.info("sandbox.resumed", sandbox_id=sandbox_id)

    @staticmethod
    def _oom_kills(sb: _Sandbox) -> int:
        try:
            return sb.cgroup.oom_kills()
        except OSError:  # not created (a failed start) or already removed
            return 0

    def _read_usage(self, sb: _Sandbox, net: dict[str, int] | None = None) -> Usage:
        try:
            stats = sb.cgroup.stats()
        except OSError:  # not created (a failed start) or already removed
            stats = RunStats()
        net = net if net is not None else self.egress.last_counters(sb.id)
        return Usage(
            cpu_seconds=stats.cpu_ns / 1e9,
            peak_memory_bytes=stats.peak_memory_bytes,
            wall_time_s=round(time.monotonic() - sb.started, 3),
            oom_kills=stats.oom_kills,
            network_tx_bytes=net.get("tx_bytes", 0), network_rx_bytes=net.get("rx_bytes", 0),
            network_denied=net.get("denied", 0), disk_used_bytes=_disk_used(sb),
        )

    def usage(self, sandbox_id: str) -> Usage:
        sb = self._sandboxes.get(sandbox_id)
        if sb is None:
            if sandbox_id in self._finished:
                return self._finished[sandbox_id]
            raise NotFound(f"sandbox {sandbox_id} not found")
        return sb.usage or self._read_usage(sb)

    async def _teardown(self, sb: _Sandbox, kill: bool) -> Usage:
        """Everything stop needs; each step tolerates the previous state being half-built."""
        sb.stopping = True
        self._unwatch(sb)
        net = await self.egress.counters(sb.id) if self.egress.is_attached(sb.id) else None
        usage = self._read_usage(sb, net)
        if sb.paused:
            # A frozen task only dies once thawed: resume first so kill and delete can finish.
            await self.crun.resume(sb.runtime_id, check=False)
            sb.paused = False
        if kill:
            await self.crun.kill(sb.runtime_id)
        rc, out = await self.crun.delete(sb.runtime_id)
        deleted = rc == 0 or "does not exist" in out or "not found" in out.lower()
        if not deleted:
            log.error("crun.delete_failed", sandbox_id=sb.id, rc=rc, output=out)
        if self.egress.is_attached(sb.id):
            await self.egress.detach(sb.id)
        # Taken here, on the loop, where file calls take their copies (_root_of): once
        # None, no call can start on a descriptor number the thread below may have reused.
        detached, sb.detached = sb.detached, None
        # Unmounting and deleting a disk is milliseconds of I/O: not on the event loop.
        await asyncio.to_thread(self._remove_bundle, sb, detached)
        if sb.policy.identity.ids is not None and deleted:
            # (A container crun could not delete may still run with these ids: never reuse them.)
            self.uid_ranges.release(sb.policy.identity.ids)
        sb.cgroup.remove()
        sb.usage = usage
        self._sandboxes.pop(sb.id, None)
        self._finished.add(sb.id, usage)
        return usage

    def _remove_bundle(self, sb: _Sandbox, detached: bundle.DetachedRoot | None) -> None:
        if detached is not None:
            self.disks.discard(detached.disk_fd, bundle.disk_image(sb.dir))
            detached.close()
        else:  # it failed before it ran: its mounts are still in our namespace
            self.disks.discard(bundle.upper_dir(sb.dir), bundle.disk_image(sb.dir))
        try:
            mounts.umount_tree(sb.dir)
        except OSError:
            log.exception("sandbox.umount_failed", sandbox_id=sb.id)
        bundle.delete(sb.dir)

    def _prune_parent_cgroups(self) -> None:
        # The node's cgroup holds its caps (cgroups/node.py) while the agent runs, so it is
        # only pruned once the backend is done (close, or cleanup at start: the agent caps it
        # again afterwards), and only when idle (a start between crun's mkdir of the parent
        # and of the leaf would fail).
        if self._sandboxes or self._starting:
            return
        node_cgroup.prune(self.cgroups, self.settings.node_id)

    async def cleanup_orphans(self, adopt: bool = False, pooled: Collection[str] = ()) -> list[str]:
        """Clear what a previous run left. With ``adopt``, containers that still run (or are
        paused) and whose bundle says what they are are taken over instead (returned), and so
        are the ones started ahead of ``pooled`` (under their runtime ids, for the warm pool);
        everything else in our crun root and under sandboxes/ is deleted."""
        adopted: list[str] = []
        ours = {sb.runtime_id for sb in self._sandboxes.values()}
        for cid, state in (await self.crun.list()).items():
            if cid in ours:
                continue
            adopted_id = self._adopt(cid, state, pooled) if adopt and state.status in ("running", "paused") else None
            if adopted_id is not None:
                adopted.append(adopted_id)
                continue
            await self.crun.kill(cid)
            await self.crun.delete(cid)
            self._cgroup(cid).remove()
        ours = {sb.runtime_id for sb in self._sandboxes.values()}
        for name in os.listdir(self.sandboxes_dir):
            path = f"{self.sandboxes_dir}/{name}"
            if name in ours:
                # Adopted: its mounts live on in the container's own namespace only; the
                # (dead) previous agent's copies are not in ours, but a crashed cleanup's are.
                mounts.umount_tree(path)
                continue
            mounts.umount_tree(path)
            shutil.rmtree(path, ignore_errors=True)
            self._cgroup(name).remove()
        # The uid ranges of the sandboxes just deleted (their claims name their directories).
        self.uid_ranges.release_unheld(self.sandboxes_dir)
        self._prune_parent_cgroups()
        return adopted

    def _adopt(self, runtime_id: str, state: CrunContainer, pooled: Collection[str]) -> str | None:
        """Rebuild the in-memory entry of a container a previous agent run started; its
        sandbox id (None: not adopted). One started ahead and never claimed is not a sandbox:
        it is taken back under its runtime id when it is one of ``pooled``, else deleted like
        an orphan."""
        sb_dir = f"{self.sandboxes_dir}/{runtime_id}"
        try:
            meta = bundle.read_meta(sb_dir)
            if meta.sandbox_id is None and (runtime_id not in pooled or state.status != "running"):
                return None
            sandbox_id = meta.sandbox_id or runtime_id
            spec, started_at, ids = meta.spec, meta.started_at, meta.ids
            pid = state.pid
            if pid <= 0:
                pid = bundle.read_init_pid(sb_dir)
            pidfd = os.pidfd_open(pid)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("sandbox.adopt_failed", sandbox_id=runtime_id, error=str(exc))
            return None
        elapsed = max(0.0, time.time() - started_at)
        if ids is not None:
            # The ids it runs with, whatever this run's settings say.
            self.uid_ranges.claim(ids, sb_dir)
        sb = _Sandbox(id=sandbox_id, spec=spec, dir=sb_dir, policy=policy_for(spec, self.settings, ids),
                      cgroup=self._cgroup(runtime_id),
                      started=time.monotonic() - elapsed, pid=pid, pidfd=pidfd,
                      paused=state.status == "paused", adopted=True,
                      runtime=runtime_id if runtime_id != sandbox_id else "")
        self._sandboxes[sandbox_id] = sb
        loop = asyncio.get_running_loop()
        loop.add_reader(pidfd, self._init_exited, sandbox_id)
        sb.timer = loop.call_later(max(0.0, spec.timeout_s - elapsed), self._timeout_fired, sandbox_id)
        log.info("sandbox.adopted", sandbox_id=sandbox_id, pid=pid, paused=sb.paused, age_s=round(elapsed, 1))
        return sandbox_id

    async def set_network(self, sandbox_id: str, network: NetworkPolicy) -> None:
        sb = self._get(sandbox_id)
        if sb.net is None or not self.egress.is_attached(sandbox_id):
            raise BadInput(f"sandbox {sandbox_id} was created with network 'none': it has no interface to open "
                           "(create it with an allowlist, even an empty one)", loc=["body"])
        await self.egress.update(sandbox_id, network)
        sb.spec = sb.spec.model_copy(update={"network": network})

    def spec_of(self, sandbox_id: str) -> SandboxSpec:
        return self._get(sandbox_id).spec

    def is_paused(self, sandbox_id: str) -> bool:
        sb = self._sandboxes.get(sandbox_id)
        return bool(sb and sb.paused)

    # ---- exec ---------------------------------------------------------------------------

    async def connect_port(self, sandbox_id: str, port: int) -> socket.socket:
        sb = self._get(sandbox_id)
        if sb.paused:
            raise SandboxPaused(f"sandbox {sandbox_id} is paused")
        sock = await asyncio.to_thread(netns.tcp_socket, sb.pid)
        try:
            await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port)), 10)
        except (OSError, TimeoutError) as exc:
            sock.close()
            raise PortClosed(f"port {port} is not open in sandbox {sandbox_id} ({exc.__class__.__name__})") from None
        return sock

    def _get(self, sandbox_id: str) -> _Sandbox:
        sb = self._sandboxes.get(sandbox_id)
        if sb is None or sb.stopping:
            raise NotFound(f"sandbox {sandbox_id} not found or not running")
        return sb

    async def exec(self, sandbox_id: str, req: ExecRequest) -> ExecResult:
        return await self._exec(sandbox_id, req, None)

    async def exec_stream(self, sandbox_id: str, req: ExecRequest) -> AsyncIterator[ExecChunk]:
        self._get(sandbox_id)  # fail before the first chunk
        async for chunk in container_exec.stream(lambda on_data: self._exec(sandbox_id, req, on_data),
                                                 req.output_encoding):
            yield chunk

    async def _exec(self, sandbox_id: str, req: ExecRequest, on_data: container_exec.OnData | None) -> ExecResult:
        sb = self._get(sandbox_id)
        if sb.paused:
            raise SandboxPaused(f"sandbox {sandbox_id} is paused", loc=["path", "sandbox_id"])
        process = container_exec.process_for(req, sb.spec.env, sb.policy.identity, sb.spec.workdir)
        oom_before = self._oom_kills(sb)
        result = await container_exec.run(self.crun, sb.runtime_id, bundle.exec_dir(sb.dir), process, req,
                                          output_limit=min(req.output_limit, self.settings.output_limit_bytes),
                                          on_data=on_data)
        result.oom_killed = self._oom_kills(sb) > oom_before
        return result

    # ---- files --------------------------------------------------------------------------

    @staticmethod
    @contextmanager
    def _root_of(sb: _Sandbox) -> Iterator[str]:
        """A path of the sandbox's merged tree for one file call. The agent's own view of the
        overlay (the layers + upper, without the container's /proc, /dev, tmpfs mounts) is
        reached through a copy of its descriptor, made on the event loop, so a teardown
        meanwhile (which closes the original in a thread) cannot turn the path into
        another sandbox's."""
        if sb.stopping:
            raise NotFound(f"sandbox {sb.id} not found or not running")
        if sb.detached is None:
            # adopted (see _Sandbox.adopted); or still starting: mounted in our namespace
            yield f"/proc/{sb.pid}/root/" if sb.adopted else f"{sb.dir}/rootfs"
            return
        fd = os.dup(sb.detached.root_fd)
        try:
            yield f"/proc/self/fd/{fd}/"  # trailing slash: O_NOFOLLOW still enters it
        finally:
            os.close(fd)

    @staticmethod
    @contextmanager
    def _disk_of(sb: _Sandbox) -> Iterator[str]:
        """A path of the sandbox's disk root (upper/ + work/), as _root_of."""
        if sb.detached is None:
            yield bundle.upper_dir(sb.dir)
            return
        fd = os.dup(sb.detached.disk_fd)
        try:
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)

    async def write_file(self, sandbox_id: str, path: str, data: FileData, mode: int = 0o644) -> int:
        sb = self._get(sandbox_id)
        identity = sb.policy.identity
        with self._root_of(sb) as rootfs:
            return await files.write(rootfs, path, data, uid=identity.host_uid, gid=identity.host_gid, mode=mode,
                                     cap=self.settings.max_upload_bytes)

    async def open_file(self, sandbox_id: str, path: str) -> tuple[int, AsyncIterator[bytes]]:
        sb = self._get(sandbox_id)
        with self._root_of(sb) as rootfs:
            return await files.read(rootfs, path)

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        _size, chunks = await self.open_file(sandbox_id, path)
        return b"".join([c async for c in chunks])

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        sb = self._get(sandbox_id)
        with self._root_of(sb) as rootfs:
            return await asyncio.to_thread(files.stat_path, rootfs, path)

    async def list_dir(self, sandbox_id: str, path: str) -> list[FileInfo]:
        sb = self._get(sandbox_id)
        with self._root_of(sb) as rootfs:
            return await asyncio.to_thread(files.list_dir, rootfs, path)
