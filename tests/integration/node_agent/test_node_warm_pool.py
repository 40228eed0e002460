"""The warm pool (sandboxes/warm_pool.py) with real crun: a create of a shape asked for before
claims a sandbox started ahead, and that sandbox is indistinguishable from one started for it."""

import hashlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import pytest_asyncio

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import FailureReason, SandboxSpec
from corral_host.cgroups.detect import cgroup_driver
from corral_node_agent.backends.container import ContainerBackend
from corral_node_agent.errors import StartFailed
from corral_node_agent.layers import LayerCache
from corral_node_agent.memory.accounting import MemoryAccounting
from corral_node_agent.sandboxes.owners import OwnerRecord, OwnerRecords
from corral_node_agent.sandboxes.service import SandboxManager
from corral_node_agent.settings import NodeAgentSettings
from tests.integration.node_agent.test_node_manager import image_service
from tests.polling import until

pytestmark = pytest.mark.asyncio

SHAPE = {"environment": "busybox", "memory_mb": 64, "disk_mb": 32, "pids_limit": 64, "env": {"STAGE": "rl"}}


def make_manager(settings: NodeAgentSettings, blob: bytes) -> SandboxManager:
    return SandboxManager(ContainerBackend(settings), LayerCache(settings.layers(), transport=image_service(blob, [])),
                          owners=OwnerRecords(f"{settings.state_dir}/owners"), warm_pool_size=2,
                          memory=MemoryAccounting(cgroup_driver(), settings.node_id))


@pytest_asyncio.fixture
async def pooled(state_dir, node_id, erofs_image):
    with open(erofs_image, "rb") as fh:  # noqa: ASYNC230 - test setup
        blob = fh.read()
    settings = NodeAgentSettings(node_id=f"{node_id}-wp", state_dir=state_dir, image_service_url="http://image-service")
    manager = make_manager(settings, blob)
    manager.ended = []
    manager.on_exit(lambda sid, reason, usage: manager.ended.append((sid, str(reason))))
    await manager.start()
    yield manager, settings, blob
    await manager.close()


async def sh(manager: SandboxManager, sid: str, cmd: str) -> str:
    r = await manager.exec(sid, ExecRequest(cmd=cmd, timeout_s=10))
    assert r.exit_code == 0, r.stderr
    return r.stdout


def owner(sid: str, tenant: str = "acme") -> OwnerRecord:
    return OwnerRecord(sandbox_id=sid, tenant=tenant, spec=SandboxSpec(**SHAPE), created_at=time.time(),
                       started_at=time.time())


# What a tenant sees of its sandbox: names, env, user, processes, cgroups, mounts, files,
# limits, capabilities, kernel, init.
TENANT_VIEW = ("hostname; cat /proc/sys/kernel/hostname; uname -a; cat /etc/hostname /etc/hosts 2>&1; env | sort; id;"
               " ps -o pid,user,nice,args; cat /proc/self/cgroup /proc/self/mountinfo /proc/self/uid_map"
               " /proc/self/gid_map /proc/self/oom_score_adj; ls -la / /home/user /tmp /dev /dev/shm; ulimit -a;"
               " grep -E 'Cap|NoNewPrivs|Seccomp' /proc/self/status; tr '\\0' ' ' </proc/1/cmdline; df /")


def tenant_view(out: str, sandbox_id: str) -> str:
    """``out`` with its sandbox's name and every number (its own in each sandbox) made generic."""
    return re.sub(r"\d+", "N", out.replace(sandbox_id, "<id>"))


async def warm(manager: SandboxManager, n: int = 2) -> None:
    await until(lambda: manager.pool.ready_count() == n, 60, f"{n} sandboxes started ahead")


async def test_a_claimed_sandbox_is_indistinguishable_from_a_fresh_one(pooled):
    manager, settings, _ = pooled
    await manager.create("cold", SandboxSpec(**SHAPE), owner("cold"))
    assert "warm_pool" not in manager.runtime("cold")  # the first of a shape starts as usual
    await warm(manager)

    await manager.create("claimed-a", SandboxSpec(**SHAPE, timeout_s=900, labels={"run": "7"}, workdir="/tmp"),
                         owner("claimed-a"))
    await manager.create("claimed-b", SandboxSpec(**SHAPE), owner("claimed-b"))
    a_runtime, b_runtime = manager.runtime("claimed-a")["warm_pool"], manager.runtime("claimed-b")["warm_pool"]
    assert a_runtime != b_runtime
    assert manager.pool.hits == 2

    for sid in ("cold", "claimed-a", "claimed-b"):
        # Its own name, env, user, limits, as one started for it.
        out = await sh(manager, sid, "hostname; echo $STAGE; id -u; tr '\\0' '\\n' </proc/1/environ | grep STAGE;"
                                     " cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max")
        assert out.split("\n")[:6] == [sid, "rl", "1000", "STAGE=rl", str(64 << 20), "64"]
        assert manager.spec(sid).timeout_s == (900 if sid == "claimed-a" else 3600)
        # Its init runs at the normal priority (a pooled one was started niced).
        assert (await sh(manager, sid, "cut -d' ' -f19 /proc/1/stat")) == "0\n"
    assert (await sh(manager, "claimed-a", "pwd")) == "/tmp\n"  # the claim's workdir
    # Everything the tenant can look at is what a fresh one shows, but for its own name and the
    # numbers every sandbox has its own of (mount ids, devices, its host id range, times); the
    # name it was started ahead under shows nowhere.
    views = {sid: await sh(manager, sid, TENANT_VIEW) for sid in ("cold", "claimed-b")}
    assert "wp-" not in views["claimed-b"] and b_runtime not in views["claimed-b"]
    assert tenant_view(views["claimed-b"], "claimed-b") == tenant_view(views["cold"], "cold")
    assert manager.owners.get("claimed-a").tenant == "acme"

    # Nothing of another sandbox: its own disk, its own user namespace ids.
    await sh(manager, "claimed-a", "echo secret > /home/user/a.txt; echo x > /dev/shm/a")
    assert (await sh(manager, "claimed-b", "ls /home/user /dev/shm")).split() == ["/dev/shm:", "/home/user:"]
    maps = {sid: await sh(manager, sid, "cat /proc/self/uid_map") for sid in ("cold", "claimed-a", "claimed-b")}
    assert len(set(maps.values())) == 3

    # Its cgroup keeps the name it was started ahead with; accounting and activity follow it.
    manager.sample_memory()
    assert manager.usage("claimed-a").working_set_bytes > 0
    cgroups = {a.sandbox_id: a.cgroup for a in manager.activity_snapshot()}
    assert cgroups == {"cold": None, "claimed-a": a_runtime, "claimed-b": b_runtime}
    cg = f"/sys/fs/cgroup/memory/corral/{settings.node_id}/{a_runtime}"
    assert os.path.isdir(cg)
    await manager.delete("claimed-a")
    assert not os.path.exists(cg) and not os.path.exists(f"{settings.state_dir}/sandboxes/{a_runtime}")
    assert manager.ended == []

    # The pool fills again; a different shape is not served from it.
    await warm(manager)
    await manager.create("other", SandboxSpec(**{**SHAPE, "memory_mb": 96}), owner("other"))
    await manager.create("other-tenant", SandboxSpec(**SHAPE), owner("other-tenant", tenant="globex"))
    assert "warm_pool" not in manager.runtime("other") and "warm_pool" not in manager.runtime("other-tenant")


async def test_a_claimed_sandbox_ends_under_its_own_id_and_a_pooled_one_ends_unreported(pooled):
    manager, _, _ = pooled
    await manager.create("first", SandboxSpec(**SHAPE), owner("first"))
    await warm(manager)
    await manager.create("short", SandboxSpec(**SHAPE, timeout_s=1), owner("short"))
    assert "warm_pool" in manager.runtime("short")
    await until(lambda: ("short", "timeout") in manager.ended, 30, "the claimed sandbox's timeout")

    # A pooled sandbox whose init dies is nobody's: forgotten, not reported, replaced.
    (ahead,) = [a for shape in manager.pool._shapes.values() for a in shape.ready][:1]
    pid = manager.backend._sandboxes[ahead.runtime_id].pid
    os.kill(pid, signal.SIGKILL)
    await until(lambda: not manager.pool.owns(ahead.runtime_id), 30, "the dead pooled sandbox forgotten")
    assert [sid for sid, _ in manager.ended] == ["short"]
    await warm(manager)


async def test_a_restarted_agent_adopts_claimed_sandboxes_and_pools_the_unclaimed_again(pooled):
    manager, settings, blob = pooled
    await manager.create("first", SandboxSpec(**SHAPE), owner("first"))
    await warm(manager)
    await manager.create("kept", SandboxSpec(**SHAPE), owner("kept"))
    runtime = manager.runtime("kept")["warm_pool"]
    await warm(manager)
    pooled_ids = sorted(a.runtime_id for shape in manager.pool._shapes.values() for a in shape.ready)
    # One pooled sandbox lost its record (a crash between its start and the write): not pooled again.
    unrecorded, repooled = pooled_ids
    os.unlink(f"{settings.state_dir}/owners/pooled/{unrecorded}.json")
    # The agent "dies": its pool and backend forget everything without stopping it.
    manager.pool._task.cancel()
    backend = manager.backend
    for sb in list(backend._sandboxes.values()):
        backend._unwatch(sb)
    backend._sandboxes.clear()
    manager._entries.clear()
    manager.pool._shapes.clear()

    again = make_manager(settings, blob)
    try:
        assert sorted(await again.start(adopt=True)) == ["first", "kept"]
        assert (await sh(again, "kept", "hostname")) == "kept\n"
        assert again.runtime_id("kept") == runtime
        # The pooled one with its record is the pool's again (no sandbox, not listed as one);
        # the other is deleted, from crun and disk.
        assert sorted(again.ids()) == ["first", "kept"]
        assert [a.runtime_id for shape in again.pool.shapes() for a in shape.ready] == [repooled]
        listed = await again.backend.crun.list()
        assert unrecorded not in listed and repooled in listed
        assert not os.path.exists(f"{settings.state_dir}/sandboxes/{unrecorded}")
        # The adopted ones hold their layer again (their owner records name it), as their
        # creates did, and so does the pooled one: the cache does not evict it under them.
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        assert [layer.digest for layer in again.owners.get("kept").layers] == [digest]
        assert again.layers.refcount(digest) == 3
        await again.delete("kept")
        assert runtime not in await again.backend.crun.list()
        assert again.layers.refcount(digest) == 2
        # A create of its shape claims it, as one started by this agent run.
        await again.create("after", SandboxSpec(**SHAPE), owner("after"))
        assert again.runtime("after")["warm_pool"] == repooled and again.pool.hits == 1
        out = await sh(again, "after", "hostname; id -u; cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
        assert out.split("\n")[:3] == ["after", "1000", str(64 << 20)]
        assert not os.path.exists(f"{settings.state_dir}/owners/pooled/{repooled}.json")
        await again.delete("after")
        assert repooled not in await again.backend.crun.list()
    finally:
        await again.close()


async def test_pooled_sandboxes_hold_no_slot_a_create_of_another_shape_needs(pooled):
    manager, _, _ = pooled
    manager.max_sandboxes = 3
    await manager.create("first", SandboxSpec(**SHAPE), owner("first"))
    await warm(manager)  # 1 sandbox + 2 pooled: the node's 3 slots
    await manager.create("other", SandboxSpec(**{**SHAPE, "memory_mb": 96}), owner("other"))
    assert "warm_pool" not in manager.runtime("other")
    assert manager.count() == 2 and manager.pool.count() == 1  # one pooled gave way
    # and the pool does not fill past the node's slots again
    assert manager._room() == 0 and manager.pool._wanted() is None
    await manager.create("claims", SandboxSpec(**SHAPE), owner("claims"))  # the last pooled one
    assert "warm_pool" in manager.runtime("claims") and manager.pool.count() == 0
    # a slot freed by a delete goes back to the pool at once (not at its next periodic look)
    await manager.delete("other")
    await until(lambda: manager.pool.ready_count() == 1, 30, "the freed slot refilled")


async def test_pooled_sandboxes_hold_no_requests_a_create_of_another_shape_needs(pooled):
    """The scheduler counts what the pool holds as free (nobody reserved it): a create it
    placed there that the pool cannot serve makes pooled ones give way until the node's
    requests fit what it advertises again."""
    manager, _, _ = pooled
    await manager.create("first", SandboxSpec(**SHAPE), owner("first"))
    each = manager.spec("first").reservation
    manager.requests_cap = (100.0, 3 * each.memory_mb, 10_000)  # 1 sandbox + 2 pooled: all of its memory
    await warm(manager)
    assert not manager._over_capacity() and manager._over_capacity(SandboxSpec(**SHAPE))
    await manager.create("other", SandboxSpec(**{**SHAPE, "memory_mb": 96}), owner("other"))
    assert "warm_pool" not in manager.runtime("other")
    assert manager.pool.count() == 1 and not manager._over_capacity()  # one pooled gave way
    assert manager.pool._wanted() is None  # and none is started into what "other" holds


async def test_pinned_creates_are_served_from_the_pool_of_their_pin_and_nothing_is_resolved(state_dir, node_id,
                                                                                             erofs_image):
    from corral_common.contracts.images import EnvironmentLayer, ResolvedImage

    with open(erofs_image, "rb") as fh:  # noqa: ASYNC230 - test setup
        blob = fh.read()
    hits: list[str] = []
    settings = NodeAgentSettings(node_id=f"{node_id}-wpin", state_dir=state_dir, image_service_url="http://image-service")
    manager = SandboxManager(ContainerBackend(settings), LayerCache(settings.layers(), transport=image_service(blob, hits)),
                             owners=OwnerRecords(f"{settings.state_dir}/owners"), warm_pool_size=2)
    await manager.start()
    try:
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        pin = ResolvedImage(name="busybox", layers=(EnvironmentLayer(kind="base", name="busybox", version="1",
                                                                     digest=digest, size=len(blob)),))
        await manager.create("first", SandboxSpec(**SHAPE), owner("first"), image=pin)
        await warm(manager)
        await manager.create("claims", SandboxSpec(**SHAPE), owner("claims"), image=pin)
        assert "warm_pool" in manager.runtime("claims")
        assert (await sh(manager, "claims", "hostname")) == "claims\n"
        # Neither the creates nor the pool's starts ahead asked what "busybox" is.
        assert not [h for h in hits if h.startswith("/v1/environments/")]
        # A create pinned to other layers (the environment re-pointed) is not served the pooled
        # one (its start on that unknown layer fails, as a start on any missing layer does).
        other = ResolvedImage(name="busybox", layers=(EnvironmentLayer(kind="base", name="busybox", version="2",
                                                                       digest="sha256:" + "0" * 64, size=1),))
        with pytest.raises(StartFailed) as failed:
            await manager.create("other", SandboxSpec(**SHAPE), owner("other"), image=other)
        assert failed.value.reason == FailureReason.image_unavailable
        assert manager.pool.hits == 1 and manager.pool.ready_count() >= 1
    finally:
        await manager.close()


async def test_stopping_the_pool_leaves_nothing_of_it_and_the_sandboxes_running(pooled):
    """What an agent does when it stops (SandboxManager.stop_pool): its sandboxes stay for the
    next run to adopt; of its pool no container, cgroup, directory, record, mount or loop device
    is left, the one being started at that moment included."""
    manager, settings, _ = pooled
    await manager.create("kept", SandboxSpec(**SHAPE), owner("kept"))
    await warm(manager)
    pooled_ids = [a.runtime_id for shape in manager.pool.shapes() for a in shape.ready]
    await manager.create("claimed", SandboxSpec(**SHAPE), owner("claimed"))  # sets off a refill ...
    await until(lambda: manager.pool._start is not None and not manager.pool._start.done(), 30, "a refill started")
    await manager.stop_pool()  # ... which is in flight now
    leftover = pool_leftovers(settings)
    assert leftover == [], leftover
    assert sorted(manager.ids()) == ["claimed", "kept"] and manager.pool.count() == 0
    assert (await sh(manager, "claimed", "hostname")) == "claimed\n"
    assert manager.runtime("claimed")["warm_pool"] in pooled_ids
    assert os.listdir(f"{settings.state_dir}/owners/pooled") == []


def pool_leftovers(settings: NodeAgentSettings) -> list[str]:
    """What of the pool's unclaimed containers (wp-<hex>, not a sandbox's) is on the host."""
    names = {f.name for f in Path(f"{settings.state_dir}/sandboxes").iterdir()}
    claimed = {n for n in names if '"sandbox_id"' in Path(f"{settings.state_dir}/sandboxes/{n}/sandbox.json").read_text()}
    found = [f"dir: {n}" for n in names - claimed]
    listed = subprocess.run(["crun", "--root", f"{settings.state_dir}/crun", "list", "-q"], capture_output=True,
                            text=True, check=True).stdout.split()
    found += [f"container: {c}" for c in listed if c.startswith("wp-") and c not in claimed]
    found += [f"cgroup: {p}" for p in Path("/sys/fs/cgroup").glob(f"*/corral/{settings.node_id}/wp-*")
              if p.name not in claimed]
    found += [f"mount: {line}" for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if "/sandboxes/wp-" in line and not any(c in line for c in claimed)]
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            path = backing.read_text().strip()
        except OSError:
            continue
        if f"{settings.state_dir}/sandboxes/wp-" in path and not any(f"/{c}/" in path for c in claimed):
            found.append(f"loop device: {backing.parent.parent.name} on {path}")
    return found
