"""SandboxManager with several backends (container, microvm, vm): which backend, which layers, what is released."""

import asyncio

import pytest

from corral_common.errors import NotFound
from corral_common.sandboxes import SandboxSpec, Usage
from corral_node_agent.backends.base import Unsupported
from corral_node_agent.sandboxes.service import SandboxCreateError, SandboxManager

BASE, TOP = {"digest": "sha256:" + "a" * 64}, {"digest": "sha256:" + "b" * 64}


class RecordingLayers:
    """Counts references per kind of acquisition, so a test sees what is still held."""

    def __init__(self):
        self.held: dict[str, int] = {"mounts": 0, "files": 0, "dax_files": 0, "disk": 0}
        self.disk_names: list[str] = []

    def add_fault_listener(self, callback):
        pass

    async def resolve_environment(self, name):
        return [BASE, TOP]  # base first, as image-service lists them

    async def acquire(self, layers):
        self.held["mounts"] += 1
        return ["/mnt/base", "/mnt/top"]

    async def release(self, layers):
        self.held["mounts"] -= 1

    async def acquire_files(self, layers, *, dax):
        self.held["dax_files" if dax else "files"] += 1
        return ["/files/base.erofs", "/files/top.erofs"]

    async def release_files(self, layers, *, dax):
        self.held["dax_files" if dax else "files"] -= 1

    async def acquire_disk_image(self, name):
        self.held["disk"] += 1
        self.disk_names.append(name)
        return f"/disks/{name}.qcow2", "qcow2"

    async def release_disk_image(self, name):
        self.held["disk"] -= 1


class KindBackend:
    on_exit = None

    def __init__(self, kind: str, layer_format: str, fail: Exception | None = None):
        self.kind, self.layer_format, self.fail = kind, layer_format, fail
        self.started: dict[str, list[str]] = {}
        self.calls: list[tuple[str, str]] = []

    def layer_format_for(self, spec):
        return self.layer_format

    def describe(self, sid):
        return {"accelerator": "tcg", "machine": self.kind} if self.kind != "container" else {}

    async def start(self, sid, spec, lower_dirs):
        if self.fail:
            raise self.fail
        self.started[sid] = lower_dirs

    async def stop(self, sid):
        self.started.pop(sid, None)
        return Usage(wall_time_s=2.0)

    async def pause(self, sid):
        self.calls.append(("pause", sid))

    async def resume(self, sid):
        self.calls.append(("resume", sid))

    async def screenshot(self, sid):
        if self.kind != "vm":
            raise Unsupported("no display")
        return b"\x89PNG"

    async def snapshot(self, sid, snapshot_id):
        if self.kind == "container":
            raise Unsupported("cannot snapshot")
        self.calls.append(("snapshot", snapshot_id))
        return 4096

    async def delete_snapshot(self, snapshot_id):
        if self.kind == "container":
            raise Unsupported("cannot snapshot")
        self.calls.append(("delete_snapshot", snapshot_id))


@pytest.fixture
def node():
    layers = RecordingLayers()
    backends = {"container": KindBackend("container", "mounts"), "microvm": KindBackend("microvm", "files"),
                "vm": KindBackend("vm", "dax_files")}
    return SandboxManager(backends, layers, vm_memory_overhead_mb=100), backends, layers


async def test_each_kind_gets_its_backend_and_its_layer_format(node):
    manager, backends, layers = node
    await manager.create("c1", SandboxSpec(environment="e", memory_mb=256))
    await manager.create("m1", SandboxSpec(environment="e", isolation="vm", memory_mb=256))
    await manager.create("v1", SandboxSpec(environment="e", display=True, memory_mb=512))
    assert backends["container"].started == {"c1": ["/mnt/top", "/mnt/base"]}  # top first
    assert backends["microvm"].started == {"m1": ["/files/top.erofs", "/files/base.erofs"]}
    assert backends["vm"].started == {"v1": ["/files/top.erofs", "/files/base.erofs"]}
    assert layers.held == {"mounts": 1, "files": 1, "dax_files": 1, "disk": 0}
    assert manager.kinds() == ["container", "microvm", "vm"]
    # VMs cost their guest memory plus the node's overhead; containers just their limit.
    assert manager.used_capacity()["memory_mb"] == 256 + (256 + 100) + (512 + 100)
    assert manager.runtime("m1") == {"backend": "microvm", "accelerator": "tcg", "machine": "microvm"}
    assert manager.runtime("c1") == {"backend": "container"}

    await manager.pause("m1")
    await manager.resume("m1")
    assert backends["microvm"].calls == [("pause", "m1"), ("resume", "m1")] and backends["container"].calls == []
    assert await manager.screenshot("v1") == b"\x89PNG"
    with pytest.raises(Unsupported) as exc:
        await manager.screenshot("c1")
    assert exc.value.status_code == 409 and exc.value.code == "unsupported_by_backend"
    assert await manager.snapshot("m1", "snap-1") == 4096

    # Released the way each was acquired, on delete and on an exit of its own.
    assert (await manager.delete("m1")).wall_time_s == 2.0
    await backends["vm"].on_exit("v1", "exited", Usage())
    await manager.delete("c1")
    assert layers.held == {"mounts": 0, "files": 0, "dax_files": 0, "disk": 0} and manager.count() == 0
    with pytest.raises(NotFound):
        await manager.screenshot("v1")


async def test_disk_image_is_the_last_lower_entry_and_released_once(node):
    manager, backends, layers = node
    await manager.create("d1", SandboxSpec(disk_image="android:9", memory_mb=1024))
    assert backends["vm"].started == {"d1": ["qcow2:/disks/android:9.qcow2"]}
    assert layers.held["disk"] == 1 and layers.held["dax_files"] == 0  # no environment: no layers
    await manager.delete("d1")
    await manager.delete("d1")  # idempotent
    assert layers.held["disk"] == 0


async def test_restore_starts_the_backend_with_the_snapshot_spec(node):
    manager, backends, layers = node
    spec = SandboxSpec(environment="e", backend="microvm", from_snapshot="snap-1")
    await manager.create("r1", spec)
    assert "r1" in backends["microvm"].started and layers.held["files"] == 1
    assert manager.spec("r1").from_snapshot == "snap-1"


async def test_a_failed_start_releases_everything(node):
    manager, backends, layers = node
    backends["vm"].fail = RuntimeError("qemu exited: no kernel")
    with pytest.raises(SandboxCreateError) as exc:
        await manager.create("f1", SandboxSpec(environment="e", disk_image="img", display=True))
    assert exc.value.reason.value == "start_failed" and "no kernel" in exc.value.message
    assert layers.held == {"mounts": 0, "files": 0, "dax_files": 0, "disk": 0} and manager.count() == 0


async def test_a_kind_the_node_lacks_fails_the_start():
    layers = RecordingLayers()
    manager = SandboxManager(KindBackend("container", "mounts"), layers)
    assert manager.kinds() == ["container"]
    with pytest.raises(SandboxCreateError, match="no microvm backend"):
        await manager.create("m1", SandboxSpec(environment="e", backend="microvm"))
    assert layers.held["files"] == 0


async def test_delete_snapshot_asks_the_kinds_that_can_snapshot(node):
    manager, backends, _ = node
    await manager.delete_snapshot("snap-9")  # the container backend's Unsupported is skipped
    assert ("delete_snapshot", "snap-9") in backends["microvm"].calls
    await manager.delete_snapshot("snap-8", "vm")
    assert backends["vm"].calls[-1] == ("delete_snapshot", "snap-8")
    assert ("delete_snapshot", "snap-8") not in backends["microvm"].calls
    await manager.delete_snapshot("snap-7", "gpu")  # a kind this node never ran left nothing here


async def test_concurrent_creates_of_one_vm_start_it_once(node):
    manager, backends, layers = node
    spec = SandboxSpec(environment="e", backend="microvm")
    await asyncio.gather(manager.create("m2", spec), manager.create("m2", spec))
    assert list(backends["microvm"].started) == ["m2"] and layers.held["files"] == 1
