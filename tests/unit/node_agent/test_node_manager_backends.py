"""SandboxManager with several backends (container, microvm, vm): which backend, which layers, what is released."""

import asyncio

import pytest

from corral_common.contracts.sandboxes import CONTAINER_REQUESTS, SandboxSpec
from corral_node_agent.backends.base import Capability, ExitReason
from corral_node_agent.backends.fake import FakeBackend
from corral_node_agent.backends.types import BootDisk, DiskFormat, LayerFormat, RootFs
from corral_node_agent.errors import NotFound, StartFailed, Unsupported
from corral_node_agent.http_errors import http_error
from corral_node_agent.sandboxes.service import SandboxManager

BASE, TOP = {"digest": "sha256:" + "a" * 64}, {"digest": "sha256:" + "b" * 64}


class RecordingLayers:
    """Counts references per kind of acquisition, so a test sees what is still held."""

    def __init__(self):
        self.held: dict[str, int] = {"mounts": 0, "files": 0, "dax_files": 0, "disk": 0}
        self.disk_names: list[str] = []

    def add_fault_listener(self, callback):
        pass

    def cleanup_orphans(self):
        pass

    async def resolve_environment(self, name, tenant=""):
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


class Clock:
    """What the fake backends read as monotonic time (usage's wall time)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


VM_CAPABILITIES = {Capability.pause, Capability.snapshot, Capability.adopt}


def kind_backend(kind: str, clock: Clock | None = None) -> FakeBackend:
    """A fake shaped like the real backend of that kind: its layer format and capabilities."""
    if kind == "container":
        return FakeBackend(capabilities={Capability.pause, Capability.adopt}, clock=clock or Clock())
    return FakeBackend(layer_format=LayerFormat.files if kind == "microvm" else LayerFormat.dax_files,
                       capabilities=VM_CAPABILITIES | ({Capability.screen} if kind == "vm" else set()),
                       runtime={"accelerator": "tcg", "machine": kind}, accelerator="tcg", clock=clock or Clock())


def started(backend: FakeBackend) -> dict[str, RootFs]:
    return {sid: sb.rootfs for sid, sb in backend.sandboxes.items()}


def calls(backend: FakeBackend, *methods: str) -> list[tuple[str, str]]:
    return [call for call in backend.calls if call[0] in methods]


@pytest.fixture
def node():
    layers = RecordingLayers()
    clock = Clock()
    backends = {kind: kind_backend(kind, clock) for kind in ("container", "microvm", "vm")}
    return SandboxManager(backends, layers, vm_memory_overhead_mb=100), backends, layers


async def test_each_kind_gets_its_backend_and_its_layer_format(node):
    manager, backends, layers = node
    await manager.create("c1", SandboxSpec(environment="e", memory_mb=256))
    await manager.create("m1", SandboxSpec(environment="e", isolation="vm", memory_mb=256))
    await manager.create("v1", SandboxSpec(environment="e", display=True, memory_mb=512))
    assert started(backends["container"]) == {"c1": RootFs(["/mnt/top", "/mnt/base"])}  # top first
    assert started(backends["microvm"]) == {"m1": RootFs(["/files/top.erofs", "/files/base.erofs"])}
    assert started(backends["vm"]) == {"v1": RootFs(["/files/top.erofs", "/files/base.erofs"])}
    assert layers.held == {"mounts": 1, "files": 1, "dax_files": 1, "disk": 0}
    assert manager.kinds() == ["container", "microvm", "vm"]
    # VMs cost their guest memory plus the node's overhead; containers their memory request
    # (by default an idle container's use, not the 256 MiB limit).
    assert manager.used_capacity()["memory_mb"] == CONTAINER_REQUESTS["memory_mb"] + (256 + 100) + (512 + 100)
    assert manager.runtime("m1") == {"backend": "microvm", "accelerator": "tcg", "machine": "microvm"}
    assert manager.runtime("c1") == {"backend": "container"}

    await manager.pause("m1")
    await manager.resume("m1")
    assert calls(backends["microvm"], "pause", "resume") == [("pause", "m1"), ("resume", "m1")]
    assert calls(backends["container"], "pause", "resume") == []
    backends["vm"].screen = b"\x89PNG"
    assert await manager.screenshot("v1") == b"\x89PNG"
    with pytest.raises(Unsupported) as exc:
        await manager.screenshot("c1")
    error = http_error(exc.value)
    assert error.status_code == 409 and error.code == "unsupported_by_backend"
    await manager.write_file("m1", "/tmp/state", b"x" * 4096)
    assert await manager.snapshot("m1", "snap-1") == 4096

    # Released the way each was acquired, on delete and on an exit of its own.
    backends["microvm"].clock.now = 2.0  # started at 0.0
    assert (await manager.delete("m1")).wall_time_s == 2.0
    await backends["vm"].end("v1", ExitReason.exited)
    await manager.delete("c1")
    assert layers.held == {"mounts": 0, "files": 0, "dax_files": 0, "disk": 0} and manager.count() == 0
    with pytest.raises(NotFound):
        await manager.screenshot("v1")


async def test_disk_image_is_the_last_lower_entry_and_released_once(node):
    manager, backends, layers = node
    await manager.create("d1", SandboxSpec(disk_image="android:9", memory_mb=1024))
    assert started(backends["vm"]) == {"d1": RootFs([], BootDisk("/disks/android:9.qcow2", DiskFormat.qcow2))}
    assert layers.held["disk"] == 1 and layers.held["dax_files"] == 0  # no environment: no layers
    await manager.delete("d1")
    await manager.delete("d1")  # idempotent
    assert layers.held["disk"] == 0


async def test_restore_starts_the_backend_with_the_snapshot_spec(node):
    manager, backends, layers = node
    spec = SandboxSpec(environment="e", backend="microvm", from_snapshot="snap-1")
    backends["microvm"].snapshots["snap-1"] = {}
    await manager.create("r1", spec)
    assert "r1" in started(backends["microvm"]) and layers.held["files"] == 1
    assert manager.spec("r1").from_snapshot == "snap-1"


async def test_a_failed_start_releases_everything(node):
    manager, backends, layers = node
    backends["vm"].fail_start = RuntimeError("qemu exited: no kernel")
    with pytest.raises(StartFailed) as exc:
        await manager.create("f1", SandboxSpec(environment="e", disk_image="img", display=True))
    assert exc.value.reason.value == "start_failed" and "no kernel" in exc.value.message
    assert layers.held == {"mounts": 0, "files": 0, "dax_files": 0, "disk": 0} and manager.count() == 0


async def test_a_kind_the_node_lacks_fails_the_start():
    layers = RecordingLayers()
    manager = SandboxManager(kind_backend("container"), layers)
    assert manager.kinds() == ["container"]
    with pytest.raises(StartFailed, match="no microvm backend"):
        await manager.create("m1", SandboxSpec(environment="e", backend="microvm"))
    assert layers.held["files"] == 0


async def test_delete_snapshot_asks_the_kinds_that_can_snapshot(node):
    manager, backends, _ = node
    await manager.delete_snapshot("snap-9")  # the container backend cannot snapshot: not asked
    assert ("delete_snapshot", "snap-9") in backends["microvm"].calls
    assert calls(backends["container"], "delete_snapshot") == []
    backends["vm"].snapshots["snap-8"] = {}
    await manager.delete_snapshot("snap-8", "vm")
    assert backends["vm"].calls[-1] == ("delete_snapshot", "snap-8")
    assert ("delete_snapshot", "snap-8") not in backends["microvm"].calls
    with pytest.raises(NotFound):  # asked of one kind, a missing snapshot is a 404
        await manager.delete_snapshot("snap-8", "vm")
    with pytest.raises(Unsupported):
        await manager.delete_snapshot("snap-8", "container")
    await manager.delete_snapshot("snap-7", "gpu")  # a kind this node never ran left nothing here


async def test_concurrent_creates_of_one_vm_start_it_once(node):
    manager, backends, layers = node
    spec = SandboxSpec(environment="e", backend="microvm")
    await asyncio.gather(manager.create("m2", spec), manager.create("m2", spec))
    assert list(started(backends["microvm"])) == ["m2"] and layers.held["files"] == 1
    assert calls(backends["microvm"], "start") == [("start", "m2")]


async def test_a_sandbox_that_ends_while_the_agent_takes_the_others_over_is_not_adopted():
    # The agent's start takes over the sandboxes a previous run left (awaiting between them):
    # one whose init exits meanwhile is gone from its backend, and must not stop the start.
    backend = kind_backend("container")
    await backend.start("alive", SandboxSpec(environment="e"), RootFs(["/mnt/base"]))

    async def left_behind(adopt: bool = False, pooled=()) -> list[str]:
        return ["ended-meanwhile", "alive"] if adopt else []

    backend.cleanup_orphans = left_behind
    manager = SandboxManager(backend, RecordingLayers())
    assert await manager.start(adopt=True) == ["alive"]
    assert manager.live_ids() == ["alive"]
