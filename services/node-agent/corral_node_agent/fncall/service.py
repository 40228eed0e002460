"""The node-agent's fncall side: one warm pool per runtime, fed by RabbitMQ work queues.

The runtimes' root is a layer of the node's layer cache, bound at one path for every pool. On a
lazy node it reads through the lazy-layer server: when that server exits, the layer cache tells
(``LayerCache.add_exit_listener``), the pools are suspended (runs on the dead root killed, new
calls held), the root is dropped and acquired again from the next server, and the pools resume.
"""

import asyncio
import hashlib
import os
import shutil
import time
from contextlib import suppress
from pathlib import Path

from aio_pika.abc import AbstractRobustConnection

from corral_common.amqp import PUBLISH_TIMEOUT_S, connect
from corral_common.logging import get_logger
from corral_host import mounts
from corral_host.cgroups.detect import cgroup_driver
from corral_host.cgroups.node import fncall_cgroup_path
from corral_node_agent.errors import ImageUnavailable
from corral_node_agent.fncall.executor import ExecutorConfig, check_host
from corral_node_agent.fncall.pool import RuntimePool
from corral_node_agent.fncall.runtimes import RUNTIME_SPECS
from corral_node_agent.fncall.settings import FncallNodeSettings
from corral_node_agent.fncall.zygote import ZYGOTE_PIDS
from corral_node_agent.isolation.policy import FNCALL_SYSCALLS
from corral_node_agent.layers.cache import LayerCache

log = get_logger(__name__)

# Where each node-agent instance binds its runtimes' root filesystem (world-traversable).
RUNTIME_ROOT_DIR = Path("/run/corral-fncall")
OWNER_FILE = ".owner-pid"  # in an instance's scratch dir: the agent that runs its workers
# ... and where its workers' cgroups are (below its node's cgroup, cgroups/node.py).
CGROUP_FILE = ".cgroup"
# Where agents from before the node cgroup put an instance's workers: corral-fncall/<instance>/<worker>.
# compat(53beb59, 2026-12-01): delete once every node has started an agent at 53beb59 or later (its
# first start removes the older instances).
LEGACY_CGROUP_PREFIX = "corral-fncall"


def instance_of(state_dir: str) -> str:
    """What tells this agent's fncall workers from those of another agent with the same node id."""
    return hashlib.sha1(str(state_dir).encode(), usedforsecurity=False).hexdigest()[:6]


def remove_cgroups(prefix: str) -> None:
    """Drop the worker cgroups below ``prefix`` (processes included)."""
    cgroup_driver().cgroup(prefix).remove()


def _instance_cgroup(entry: Path) -> str:
    try:
        return (entry / CGROUP_FILE).read_text().strip() or f"{LEGACY_CGROUP_PREFIX}/{entry.name}"
    except OSError:
        return f"{LEGACY_CGROUP_PREFIX}/{entry.name}"


def worker_tasks(settings: FncallNodeSettings) -> int:
    """The most tasks this node's fncall workers hold at once (as many runs as every pool at its
    max size, capped by max_running, each at pids_max; python's zygotes at ZYGOTE_PIDS): the
    node keeps them out of what its sandboxes may reserve of its pids cap."""
    if not settings.enabled:
        return 0
    names = [n for n in settings.runtime_names if n in RUNTIME_SPECS]
    zygote = ZYGOTE_PIDS if settings.warm_python and "python" in names else 0
    runs = min(settings.pool_max * len(names), settings.max_running)
    return runs * settings.pids_max + settings.pool_max * zygote


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _has_processes(entry: Path) -> bool:
    return cgroup_driver().cgroup(_instance_cgroup(entry)).populated()


def remove_stale_instances(scratch_root: Path, own: str) -> list[str]:
    """Workers of agents that died without cleaning up (SIGKILL, node loss): every instance in
    the scratch root whose owner pid is gone (or that has no owner file, no processes, and is
    older than two minutes)."""
    removed = []
    if not scratch_root.is_dir():
        return removed
    for entry in scratch_root.iterdir():
        if not entry.is_dir() or entry.name == own:
            continue
        try:
            owner = int((entry / OWNER_FILE).read_text())
            stale = not _alive(owner)
        except (OSError, ValueError):  # no owner (yet): only when old and idle, never a starting agent's
            try:
                old = time.time() - entry.stat().st_mtime > 120
            except OSError:
                continue
            stale = old and not _has_processes(entry)
        if stale:
            with suppress(Exception):
                remove_cgroups(_instance_cgroup(entry))
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


class FncallPools:
    def __init__(self, node_id: str, amqp_url: str, settings: FncallNodeSettings, *, instance: str = "",
                 layers: LayerCache | None = None, publish_timeout_s: float = PUBLISH_TIMEOUT_S):
        self.node_id = node_id
        self.publish_timeout_s = publish_timeout_s
        # The runtimes' root filesystem is a Corral environment (image-service layers),
        # mounted read-only through the node's layer cache like a container's.
        self.layers = layers
        self._held_layers: list = []
        # Cgroups and scratch dirs are named by node id and instance (a hash of the node's state
        # dir), so two platforms on one host that both have a "node-1" never share workers.
        # The workers' cgroups are below the node's, under its caps.
        self.instance = f"{node_id}-{instance}" if instance else node_id
        self.cgroup_prefix = fncall_cgroup_path(node_id, instance)
        self.amqp_url = amqp_url
        self.settings = settings
        self.pools: dict[str, RuntimePool] = {}
        self.status_message = "starting"
        self._connection: AbstractRobustConnection | None = None
        self._starter: asyncio.Task | None = None
        self._running = asyncio.Semaphore(settings.max_running)
        self._remounter: asyncio.Task | None = None
        self._root_lost = False  # the root's server exited since the last (re-)mount began
        if layers is not None:
            layers.add_exit_listener(self._layers_gone)

    def config(self, rootfs: Path) -> ExecutorConfig:
        s = self.settings
        return ExecutorConfig(rootfs=rootfs, scratch_dir=Path(s.scratch_dir) / self.instance,
                              seccomp_path=FNCALL_SYSCALLS.to_bpf(Path(s.cache_dir) / "seccomp"), pids_max=s.pids_max,
                              compile_memory_mb=s.compile_memory_mb)

    async def start(self) -> None:
        """Start in the background: the runtime tree may still be building (the pools start when it exists)."""
        if not self.settings.enabled:
            self.status_message = "disabled (CORRAL_FNCALL_ENABLED=false)"
            return
        self._starter = asyncio.create_task(self._start_when_ready())

    async def _runtime_root(self) -> tuple[Path | None, str]:
        """Mount the runtimes' environment; (root, "") or (None, why not yet)."""
        names = self.settings.runtime_names
        environment = RUNTIME_SPECS[names[0]].environment if names else "judge"
        if self.layers is None:
            return None, "no layer cache"
        try:
            layers = await self.layers.resolve_environment(environment)
        except ImageUnavailable as exc:
            return None, (f"waiting for environment {environment!r} in image-service ({exc.message}); register it with "
                          f"`python -m corral_image_service.cli build-base judge --name {environment} --version 1`")
        if len(layers) != 1:
            return None, f"environment {environment!r} must be a single layer for fncall (it has {len(layers)})"
        try:
            (mount,) = await self.layers.acquire(layers)
        except ImageUnavailable as exc:
            return None, f"cannot mount environment {environment!r}: {exc.message}"
        self._held_layers = layers
        # The workers' bwrap runs as an unprivileged user that may not traverse the node's state
        # dir: the layer is bound at a path anyone can reach (in the agent's private mount
        # namespace, so nothing shows on the host).
        root = RUNTIME_ROOT_DIR / self.instance
        root.mkdir(mode=0o755, parents=True, exist_ok=True)
        if not mounts.is_mountpoint(str(root)):
            mounts.bind_mount(mount, str(root))
        return root, ""

    async def _mount_root_when_ready(self) -> Path:
        """Mount the runtimes' root, waiting (polling image-service) until it can be."""
        while True:
            rootfs, reason = await self._runtime_root()
            if rootfs is not None:
                reason = check_host(ExecutorConfig(rootfs=rootfs, scratch_dir=Path("/"), seccomp_path=Path("/")))
                if not reason:
                    return rootfs
                await self._drop_root()
            if self.status_message != reason:
                log.warning("fncall.waiting", reason=reason)
            self.status_message = reason
            await asyncio.sleep(self.settings.rootfs_poll_s)

    async def _drop_root(self) -> None:
        mounts.umount(str(RUNTIME_ROOT_DIR / self.instance))
        held, self._held_layers = self._held_layers, []
        if held:
            await self.layers.release(held)

    async def _start_when_ready(self) -> None:
        rootfs = await self._mount_root_when_ready()
        try:
            config = await asyncio.to_thread(self.config, rootfs)
            remove_cgroups(self.cgroup_prefix)
            shutil.rmtree(config.scratch_dir, ignore_errors=True)
            config.scratch_dir.mkdir(parents=True, exist_ok=True)
            (config.scratch_dir / CGROUP_FILE).write_text(self.cgroup_prefix)
            (config.scratch_dir / OWNER_FILE).write_text(str(os.getpid()))
            stale = remove_stale_instances(config.scratch_dir.parent, self.instance)
            if stale:
                log.info("fncall.removed_stale_workers", instances=stale)
            self._connection = await connect(self.amqp_url)
            for name in self.settings.runtime_names:
                if name not in RUNTIME_SPECS:
                    log.warning("fncall.unknown_runtime", runtime=name)
                    continue
                if missing := RUNTIME_SPECS[name].missing_tools(rootfs):
                    # A judge tree from before this runtime existed: leave its queue to nodes that have it.
                    log.warning("fncall.runtime_not_in_tree", runtime=name, missing=missing)
                    continue
                pool = RuntimePool(name, self.node_id, config, self._connection, min_size=self.settings.pool_min,
                                   max_size=self.settings.pool_max,
                                   warm=self.settings.warm_python and name == "python",
                                   scale_interval_s=self.settings.scale_interval_s,
                                   idle_ticks_to_shrink=self.settings.idle_ticks_to_shrink,
                                   cgroup_prefix=self.cgroup_prefix, publish_timeout_s=self.publish_timeout_s,
                                   running=self._running)
                await pool.start()
                self.pools[name] = pool
            self.status_message = "ready"
        except Exception as exc:
            self.status_message = f"failed: {type(exc).__name__}: {exc}"
            log.exception("fncall.start_failed")

    # -- the root's lazy-layer server exiting --------------------------------------------------

    def _layers_gone(self, digests: list[str]) -> None:
        """(On the event loop.) The lazy-layer server behind ``digests`` exited: if the root is
        one of them (or is being mounted again now), suspend the pools and mount it anew."""
        renewing = self._remounter is not None and not self._remounter.done()
        if not renewing and not any(layer.digest in digests for layer in self._held_layers):
            return
        self._root_lost = True
        for pool in self.pools.values():
            pool.suspend()
        if not renewing:
            self._remounter = asyncio.create_task(self._remount_root())

    async def _remount_root(self) -> None:
        if self._starter is not None and not self._starter.done():
            # Pools made by a start still under way suspend with the others below.
            with suppress(Exception):
                await asyncio.shield(self._starter)
        while self._root_lost:  # again when the next server exits meanwhile too
            self._root_lost = False
            for pool in self.pools.values():
                pool.suspend()
            self.status_message = "mounting the runtime root again (its lazy-layer server exited)"
            log.warning("fncall.root_lost", instance=self.instance)
            await self._drop_root()
            await self._mount_root_when_ready()
        for pool in self.pools.values():
            await pool.resume()
        self.status_message = "ready"
        log.info("fncall.root_remounted", instance=self.instance)

    async def close(self) -> None:
        if self._remounter is not None:
            self._remounter.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await self._remounter
        if self._starter is not None:
            self._starter.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await self._starter
        for pool in self.pools.values():
            await pool.close()
        self.pools.clear()
        if self._connection is not None:
            with suppress(Exception):
                await self._connection.close()
        with suppress(Exception):
            remove_cgroups(self.cgroup_prefix)
        shutil.rmtree(Path(self.settings.scratch_dir) / self.instance, ignore_errors=True)
        if self._held_layers and self.layers is not None:
            with suppress(Exception):
                await self._drop_root()
            with suppress(OSError):
                (RUNTIME_ROOT_DIR / self.instance).rmdir()

    def status(self) -> dict:
        return {"node_id": self.node_id, "status": self.status_message,
                "pools": [pool.status() for pool in self.pools.values()]}
