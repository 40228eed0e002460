"""Node-agent service: sandboxes on this host, driven by the bus, reached over HTTP."""

import asyncio
import sys
from contextlib import asynccontextmanager

from fastapi import FastAPI

from corral_common.amqp import EventBus
from corral_common.contracts.events import SandboxPlace, SandboxStop, node_queue_name, node_routing_key
from corral_common.contracts.node import NodeHealth
from corral_common.logging import configure_logging, get_logger
from corral_common.store.state import StateStore
from corral_common.telemetry import instrument_app, setup_tracing
from corral_common.web.metrics import install_metrics
from corral_host.cgroups import node as node_cgroup
from corral_host.cgroups.detect import cgroup_driver
from corral_node_agent import capacity as node_capacity
from corral_node_agent import metrics
from corral_node_agent.backends.base import SandboxBackend
from corral_node_agent.capacity import disk, memory_guard
from corral_node_agent.capacity.resources import default_reserved_memory_mb, read_host
from corral_node_agent.container import Services, services_of
from corral_node_agent.disks.pressure import DiskPressure
from corral_node_agent.events.pulse import LivenessPulse
from corral_node_agent.events.service import NodeEvents
from corral_node_agent.fncall.router import router as fncall_router
from corral_node_agent.fncall.service import FncallPools, instance_of
from corral_node_agent.http_errors import install_node_error_handlers
from corral_node_agent.memory.accounting import sample_memory_forever
from corral_node_agent.sandboxes.router import activity_router, snapshots_router
from corral_node_agent.sandboxes.router import router as sandboxes_router
from corral_node_agent.sandboxes.service import build_manager
from corral_node_agent.settings import NodeAgentSettings

log = get_logger(__name__)


def create_app(settings: NodeAgentSettings | None = None, backends: SandboxBackend | None = None) -> FastAPI:
    """The node-agent; ``backends`` replaces this host's (tests run it on a FakeBackend)."""
    settings = settings or NodeAgentSettings()

    configure_logging(f"node-agent:{settings.node_id}", settings.log_level, settings.log_json)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if sys.version_info < (3, 12):  # 3.12+ waits through pidfds by default
            # The 3.11 default watcher starts a thread per child (crun call).
            watcher = asyncio.PidfdChildWatcher()
            watcher.attach_loop(asyncio.get_running_loop())
            asyncio.set_child_watcher(watcher)
        setup_tracing("corral-node-agent", settings.otel_exporter_otlp_endpoint)
        # This node's share of the host, claimed against the other agents on it.
        capacity, claim = node_capacity.claim(settings)
        try:
            # crun containers always; microvm and vm where QEMU is installed.
            manager = build_manager(settings, backends)
            manager.max_sandboxes = capacity.max_sandboxes
            manager.requests_cap = (capacity.cpu, capacity.memory_mb, capacity.pids)  # the warm pool's bound
            store = StateStore.from_url(settings.redis_url, **settings.redis_pool())
            bus = await EventBus(settings.amqp_url, publish_timeout_s=settings.amqp_publish_timeout_s).connect()
            events = NodeEvents(settings, store, bus, manager, capacity)
            # Sandboxes a previous run of this agent left running are re-adopted, not killed
            # (after NodeEvents listens: one adopted only to be ended at once is reported).
            await manager.start(adopt=settings.adopt_on_start)
            lazy = manager.layers.lazy
            metrics.CHUNK_CACHES.watch(settings.node_id, lazy.stats)
            lazy_start = None
            if settings.layer_mode == "lazy":
                # In the background: the heartbeat must not wait for a process to start.
                lazy_start = asyncio.create_task(lazy.start())
            # Every sandbox, VM and fncall worker of the node runs below its capped cgroup (after
            # start(), whose cleanup removes the empty cgroups a previous run left).
            cgroups = cgroup_driver()
            node_group = node_cgroup.cap(cgroups, settings.node_id, capacity.cgroup_memory_bytes, capacity.cgroup_pids)
            reserve = settings.system_reserved_memory_mb
            guard = memory_guard.guard_for(
                node_group, capacity.cgroup_memory_bytes, capacity.cgroup_pids, settings.memory_guard_floor_mb,
                default_reserved_memory_mb(read_host()) if reserve is None else reserve,
                requested=lambda: int(manager.used_capacity()["memory_mb"]) * memory_guard.MIB)
            events.memory_guard = guard
            services = app.state.services = Services(settings=settings, manager=manager, events=events,
                                                     capacity=capacity,
                                                     gauges=metrics.NodeGauges(settings.node_id, manager))
            # Heartbeat before consuming so the scheduler sees us as soon as we take work.
            await events.heartbeat_once()
            await events.reconcile()
            node = settings.node_id
            await bus.consume(node_queue_name(node, "place"), [node_routing_key(node, "place")], SandboxPlace,
                              events.on_place, prefetch=32)
            await bus.consume(node_queue_name(node, "stop"), [node_routing_key(node, "stop")], SandboxStop,
                              events.on_stop, prefetch=64)
            heartbeat = asyncio.create_task(events.heartbeat_forever())
            # Keeps the node live while the loop is busy (off the loop: the loop cannot starve it).
            pulse = LivenessPulse(node, settings.redis_url, events.liveness, settings.heartbeat_interval_s,
                                  timeout_s=settings.heartbeat_timeout_s / 2)
            pulse.start()
            # What the running sandboxes' thin disks may still take of the host (disks/pressure.py).
            pressure = DiskPressure(settings.state_dir, await asyncio.to_thread(
                disk.free_reserve_mb, settings.disk_free_reserve_mb, settings.state_dir), manager.open_disks,
                manager.disk_limit_bytes, settings.host_share)
            disk_pressure = asyncio.create_task(pressure.run_forever())
            memory_sampler = asyncio.create_task(sample_memory_forever(
                manager, settings.memory_sample_interval_s, settings.memory_sample_max_duty))
            # The fncall worker pools, on the same layers as the sandboxes.
            pools = FncallPools(settings.node_id, settings.amqp_url, settings.fncall,
                                instance=instance_of(settings.state_dir), layers=manager.layers,
                                publish_timeout_s=settings.amqp_publish_timeout_s)
            try:
                await pools.start()
                services.fncall = pools
                try:
                    yield
                finally:
                    await pools.close()
            finally:
                if guard is not None:
                    guard.stop()
                # Its sandboxes keep running for the next run to adopt; its warm pool does not
                # (nothing of it is left: container, cgroup, mounts, disk).
                try:
                    await manager.stop_pool()
                except Exception:
                    log.exception("warm_pool.stop_failed")
                pulse.stop()
                heartbeat.cancel()
                disk_pressure.cancel()
                memory_sampler.cancel()
                if lazy_start is not None:
                    lazy_start.cancel()
                await bus.close()
                await store.close()
                node_cgroup.release(cgroups, settings.node_id)
        finally:
            claim.release()  # the claim file stays while sandboxes left to re-adopt run

    app = FastAPI(title=f"Corral node-agent {settings.node_id}", lifespan=lifespan)
    app.state.settings = settings  # the internal token's check reads it
    install_node_error_handlers(app)
    instrument_app(app)

    async def node_gauges() -> None:  # read at each /metrics scrape, once the lifespan built them
        if (services := services_of(app)) is not None:
            await services.gauges()

    install_metrics(app, "node-agent", collectors=[node_gauges])
    app.include_router(sandboxes_router)
    app.include_router(snapshots_router)
    app.include_router(activity_router)
    app.include_router(fncall_router)

    @app.get("/healthz")
    async def healthz() -> NodeHealth:
        services = services_of(app)
        manager = services.manager if services is not None else None
        return NodeHealth(status="ok", node_id=settings.node_id, sandboxes=manager.count() if manager else 0,
                          backends=manager.kinds() if manager else [])

    return app


async def cleanup(settings: NodeAgentSettings) -> None:
    """Remove every container, mount and cgroup a (stopped) agent with these settings left."""
    from corral_node_agent.fncall.service import remove_cgroups

    remove_cgroups(node_cgroup.fncall_cgroup_path(settings.node_id, instance_of(settings.state_dir)))
    manager = build_manager(settings)
    await manager.start()  # deletes every container (warm pool's too); the node's cgroup goes once empty
    await manager.close()  # and what this run opened (the pool's task, shared mounts, layers)


def main(argv: list[str] | None = None) -> None:
    """``python -m corral_node_agent`` serves; ``python -m corral_node_agent cleanup`` cleans up and exits."""
    import sys

    from corral_common.web.serving import serve
    from corral_host.namespaces import enter_private_mount_namespace
    from corral_host.oom import set_oom_score_adj
    from corral_node_agent.capacity.open_files import raise_open_files_limit
    from corral_node_agent.isolation.policy import AGENT_OOM_SCORE_ADJ

    args = sys.argv[1:] if argv is None else argv
    # Must run while the process is still single-threaded (before uvicorn and the loop).
    enter_private_mount_namespace()
    raise_open_files_limit()
    # Last for the OOM killer, and so are QEMU and the helpers it starts (they inherit it);
    # sandboxes' own processes get SANDBOX_OOM_SCORE_ADJ (first).
    set_oom_score_adj(AGENT_OOM_SCORE_ADJ)
    settings = NodeAgentSettings()
    if args[:1] == ["cleanup"]:
        asyncio.run(cleanup(settings))
        return
    # The stock asyncio loop, not uvloop: libuv's process spawn is ~2x slower here, and the
    # node-agent's hot path (crun run/exec) is spawning processes.
    serve(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level, loop="asyncio")
