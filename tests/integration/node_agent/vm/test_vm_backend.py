"""The microvm and vm backends on real QEMU (TCG here: slow, so few VMs, each reused).

Needs root, qemu-system-x86_64, mkfs.erofs and the guest kit (built once per machine by
`python -m corral_node_agent guestkit build`; the fixture builds it when missing).
"""

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import uuid

import pytest

from corral_common.contracts.display import KeyPress, TypeText
from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec
from corral_node_agent.backends.base import ExitReason
from corral_node_agent.backends.types import BootDisk, DiskFormat, RootFs
from corral_node_agent.backends.vm.config import UPPER_FILE
from corral_node_agent.errors import BadInput, Conflict, DiskFull, NotFound, Unsupported
from corral_node_agent.settings import NodeAgentSettings
from tests.polling import until

pytestmark = [pytest.mark.xdist_group("vm")]

if shutil.which("qemu-system-x86_64") is None:
    pytest.skip("VM tests need qemu-system-x86_64 (apt install qemu-system-x86)", allow_module_level=True)




_NODES: list[str] = []  # the node ids these tests made up (their cgroups are pruned after each)


@pytest.fixture(autouse=True)
def _prune_node_cgroups():
    """The tests stop their VMs but not their backends: the node cgroups a backend's close
    would prune (empty /corral/vmtest-* parents) go here, as close() does."""
    yield
    from corral_host.cgroups import node as node_cgroup
    from corral_host.cgroups.detect import cgroup_driver

    driver = cgroup_driver()
    while _NODES:
        node_id = _NODES.pop()
        if driver.available() and not node_cgroup.in_use(driver, node_id):
            node_cgroup.prune(driver, node_id)


def _settings(work_dir, guestkit_dir, **kw) -> NodeAgentSettings:
    _NODES.append(f"vmtest-{uuid.uuid4().hex[:6]}")
    return NodeAgentSettings(node_id=_NODES[-1], state_dir=f"{work_dir}/vm-state-{uuid.uuid4().hex[:6]}",
                             guestkit_dir=guestkit_dir, **kw)


def _spec(backend: str, **kw) -> SandboxSpec:
    return SandboxSpec(environment="busybox", backend=backend, memory_mb=256, **kw)


class Exits:
    def __init__(self):
        self.events: dict[str, ExitReason] = {}

    def __call__(self, sandbox_id, reason, usage):
        self.events[sandbox_id] = reason


def _qemu_pids(directory: str) -> list[int]:
    from corral_node_agent.backends.vm.adopt import qemu_pids_using as _qemu_pids_using

    return _qemu_pids_using(directory)


async def test_microvm_exec_files_pause_snapshot_restore_and_delete(work_dir, guestkit_dir, layers):
    from corral_node_agent.backends.vm.backend import MicroVmBackend

    backend = MicroVmBackend(_settings(work_dir, guestkit_dir))
    exits = Exits()
    backend.on_exit = exits
    sid, restored = "vm-" + uuid.uuid4().hex[:8], "vm-" + uuid.uuid4().hex[:8]
    snap = "snap-" + uuid.uuid4().hex[:8]
    await backend.start(sid, _spec("microvm", env={"GREETING": "hi"}), RootFs([layers["blk"]]))
    try:
        info = backend.describe(sid)
        assert info["machine"] == "microvm" and info["image_transport"] == "virtio-blk"
        assert info["accelerator"] in ("kvm", "tcg")
        # QEMU itself runs as a uid of its own, not root.
        (pid,) = _qemu_pids(os.path.join(backend.root, sid))
        uid = int(next(line for line in open(f"/proc/{pid}/status") if line.startswith("Uid:")).split()[1])
        assert uid != 0 and info["qemu_user"] == f"{uid}:{uid}"

        res = await backend.exec(sid, ExecRequest(cmd="cat /etc/corral-layer; echo $GREETING; id -u; exit 3"))
        assert (res.exit_code, res.stdout.split()) == (3, ["busybox-base", "hi", "1000"])
        res = await backend.exec(sid, ExecRequest(cmd=["id", "-u"], user="root"))
        assert res.stdout.strip() == "0"
        # The layer is read-only, the upper writable.
        res = await backend.exec(sid, ExecRequest(cmd="echo changed >> /etc/corral-layer && tail -1 /etc/corral-layer",
                                                  user="root"))
        assert res.stdout.strip() == "changed"  # copied up into the upper disk; the layer file is untouched

        assert await backend.write_file(sid, "/home/user/notes.txt", b"hello vm\n") == 9
        assert await backend.read_file(sid, "/home/user/notes.txt") == b"hello vm\n"
        names = {f.name for f in await backend.list_dir(sid, "/home/user")}
        assert "notes.txt" in names
        with pytest.raises(NotFound):
            await backend.read_file(sid, "/nope")

        # Pause stops progress, resume continues it.
        await backend.exec(sid, ExecRequest(cmd="(i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new && mv /tmp/count.new /tmp/count; sleep 0.1; done) "
                                                "</dev/null >/dev/null 2>&1 &", user="root"))
        await until(lambda: _count_above(backend, sid, 0), what="counter")
        await backend.pause(sid)
        with pytest.raises(Conflict):
            await backend.exec(sid, ExecRequest(cmd="true"))
        await backend.resume(sid)
        first = int(await backend.read_file(sid, "/tmp/count"))
        await until(lambda: _count_above(backend, sid, first), what="counter to advance after resume")

        # Snapshot keeps files and running processes; the source keeps running.
        size = await backend.snapshot(sid, snap)
        assert size > 1024 * 1024
        await backend.start(restored, _spec("microvm", from_snapshot=snap), RootFs([layers["blk"]]))
        assert await backend.read_file(restored, "/home/user/notes.txt") == b"hello vm\n"
        after = int(await backend.read_file(restored, "/tmp/count"))
        await until(lambda: _count_above(backend, restored, after), what="restored counter to advance")
        res = await backend.exec(sid, ExecRequest(cmd="echo still-here"))
        assert res.stdout.strip() == "still-here"
    finally:
        directories = [os.path.join(backend.root, s) for s in (sid, restored)]
        await backend.stop(sid)
        await backend.stop(restored)
        with contextlib.suppress(NotFound):  # not there when the test failed before taking it
            await backend.delete_snapshot(snap)
    for directory in directories:
        assert not os.path.exists(directory)
        assert _qemu_pids(directory) == []
    assert exits.events == {}  # stopped on request, not ended on their own


async def test_a_microvm_disk_is_disk_mb_and_filling_it_keeps_the_guest_running(work_dir, guestkit_dir, layers):
    """The guest's upper is its own disk (not guest RAM): more than its RAM fits, a full disk
    is ENOSPC inside and DiskFull (507) through the files API, and the guest runs on (with a
    tmpfs upper, an upload past guest RAM panicked it and answered 502)."""
    from corral_node_agent.backends.vm.backend import MicroVmBackend

    backend = MicroVmBackend(_settings(work_dir, guestkit_dir))
    exits = Exits()
    backend.on_exit = exits
    sid = "vm-" + uuid.uuid4().hex[:8]
    await backend.start(sid, SandboxSpec(environment="busybox", backend="microvm", memory_mb=128, disk_mb=192),
                        RootFs([layers["blk"]]))
    try:
        # Preallocated (the guest's ext4 is out of the host's reach): it never takes host space later.
        image = os.path.join(backend.root, sid, UPPER_FILE)
        assert os.stat(image).st_blocks * 512 >= os.path.getsize(image)
        res = await backend.exec(sid, ExecRequest(cmd="df -k / | tail -1; dd if=/dev/zero of=/home/user/big bs=1M "
                                                      "count=160 2>&1 && sync && echo ok", timeout_s=300))
        assert res.exit_code == 0 and res.stdout.strip().endswith("ok"), res.stdout
        assert 192 * 1024 <= int(res.stdout.split()[1]) <= 200 * 1024  # the disk is disk_mb

        async def upload(total_mb: int):
            for _ in range(total_mb * 4):
                yield b"\0" * (256 * 1024)

        with pytest.raises(DiskFull):
            await backend.write_file(sid, "/home/user/upload.bin", upload(64))
        with pytest.raises(NotFound):  # no partial file
            await backend.read_file(sid, "/home/user/upload.bin")
        res = await backend.exec(sid, ExecRequest(cmd="echo alive; dd if=/dev/zero of=/tmp/more bs=1M count=64",
                                                  timeout_s=120))
        assert res.stdout.startswith("alive") and "No space left on device" in res.stderr
        res = await backend.exec(sid, ExecRequest(cmd="rm /home/user/big /tmp/more && echo room > /tmp/x && cat /tmp/x"))
        assert res.stdout == "room\n"
    finally:
        directory = os.path.join(backend.root, sid)
        await backend.stop(sid)
    assert exits.events == {} and not os.path.exists(directory)


async def _count_above(backend, sid, value) -> bool:
    try:
        return int(await backend.read_file(sid, "/tmp/count")) > value
    except (ValueError, NotFound):
        return False


async def test_vm_maps_layers_with_dax_and_its_screen_changes_when_typing(work_dir, guestkit_dir, layers):
    from corral_node_agent.backends.vm.backend import FullVmBackend

    backend = FullVmBackend(_settings(work_dir, guestkit_dir))
    sid = "vm-" + uuid.uuid4().hex[:8]
    await backend.start(sid, _spec("vm", display=True), RootFs([layers["dax"]]))
    try:
        assert backend.describe(sid)["image_transport"] == "virtio-pmem+dax"
        res = await backend.exec(sid, ExecRequest(cmd="cat /etc/corral-layer /.corral/layers"))
        # The guest's init mounted the base layer from /dev/pmem0 with DAX (and says so).
        assert res.stdout.split() == ["busybox-base", "0", "pmem0", "dax"], res.stdout

        before = await backend.screenshot(sid)
        assert before[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = int.from_bytes(before[16:20], "big"), int.from_bytes(before[20:24], "big")
        assert (width, height) in ((720, 400), (640, 480), (800, 600), (1024, 768), (1280, 800))
        # Keys reach the shell on the screen's console: the typed command runs.
        await backend.send_input(sid, [TypeText(text="touch /tmp/typed-on-screen"), KeyPress(keys=["ret"])])
        await until(lambda: _exists(backend, sid, "/tmp/typed-on-screen"), what="the typed command to run")
        after = await until(lambda: _changed_screen(backend, sid, before), what="the screen to change")
        with pytest.raises(BadInput, match="input refused"):  # a 400, not a QEMU error
            await backend.send_input(sid, [KeyPress(keys=["no-such-key"])])
        assert after[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        await backend.stop(sid)


async def _exists(backend, sid, path) -> bool:
    return (await backend.exec(sid, ExecRequest(cmd=["test", "-e", path]))).exit_code == 0


async def _changed_screen(backend, sid, before):
    now = await backend.screenshot(sid)
    return now if now != before else None


async def test_microvm_has_no_screen(work_dir, guestkit_dir, layers):
    from corral_node_agent.backends.vm.backend import MicroVmBackend

    backend = MicroVmBackend(_settings(work_dir, guestkit_dir))
    with pytest.raises(NotFound):
        await backend.screenshot("vm-missing")
    assert issubclass(Unsupported, Conflict)


async def test_guest_panic_and_hang_are_reported_and_the_node_stays_healthy(work_dir, guestkit_dir, layers):
    from corral_node_agent.backends.vm.backend import MicroVmBackend

    backend = MicroVmBackend(_settings(work_dir, guestkit_dir, vm_watchdog_interval_s=0.5, vm_watchdog_timeout_s=2.0))
    exits = Exits()
    backend.on_exit = exits
    panics, hangs = "vm-" + uuid.uuid4().hex[:8], "vm-" + uuid.uuid4().hex[:8]
    await asyncio.gather(backend.start(panics, _spec("microvm"), RootFs([layers["blk"]])),
                         backend.start(hangs, _spec("microvm"), RootFs([layers["blk"]])))
    try:
        panic_dir = os.path.join(backend.root, panics)
        crash = asyncio.ensure_future(backend.exec(panics, ExecRequest(cmd="echo c > /proc/sysrq-trigger", user="root")))
        await until(lambda: panics in exits.events, what="the panic to be reported")
        assert exits.events[panics] == ExitReason.guest_panic
        with pytest.raises(Exception):
            await asyncio.wait_for(crash, 10)  # the call in flight fails, it does not hang
        assert _qemu_pids(panic_dir) == [] and not os.path.exists(panic_dir)

        # A guest whose userspace stops: the agent (PID 1) is moved into a cgroup that is then
        # frozen, so the VM runs on but nothing answers — a hung guest, from the host's view.
        # (The guest agent mounts cgroup2 itself, for its commands' memory cgroup.)
        freeze = ("mkdir -p /sys/fs/cgroup && { grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts || "
                  "mount -t cgroup2 none /sys/fs/cgroup; } && mkdir /sys/fs/cgroup/hung && "
                  "echo 1 > /sys/fs/cgroup/hung/cgroup.procs && "
                  "setsid sh -c 'sleep 0.5; echo 1 > /sys/fs/cgroup/hung/cgroup.freeze' </dev/null >/dev/null 2>&1 &")
        res = await backend.exec(hangs, ExecRequest(cmd=freeze, user="root"))
        assert res.exit_code == 0, res.stderr
        await until(lambda: hangs in exits.events, timeout_s=60, what="the hang to be reported")
        assert exits.events[hangs] == ExitReason.guest_unresponsive
        assert backend.list_running() == []
    finally:
        await backend.stop(panics)
        await backend.stop(hangs)


def _boot_sector(message: bytes) -> bytes:
    """A 512-byte MBR that prints message through the BIOS (int 10h teletype), then halts."""
    code = bytes([0xB4, 0x0E,              # mov ah, 0x0e
                  0xBE, 0x11, 0x7C,        # mov si, 0x7c11 (the message)
                  0xAC,                    # lodsb
                  0x08, 0xC0,              # or al, al
                  0x74, 0x04,              # jz halt
                  0xCD, 0x10,              # int 0x10
                  0xEB, 0xF7,              # jmp lodsb
                  0xF4, 0xEB, 0xFD])       # halt: hlt; jmp halt
    sector = code + message + b"\0"
    return sector.ljust(510, b"\0") + b"\x55\xaa"


async def test_vm_boots_a_user_disk_image_through_a_private_overlay(work_dir, guestkit_dir):
    from corral_node_agent.backends.vm.backend import FullVmBackend

    image = f"{work_dir}/user-disk.img"
    with open(image, "wb") as fh:
        fh.write(_boot_sector(b"Corral user disk image"))
        fh.truncate(8 * 1024 * 1024)
    os.chmod(image, 0o444)  # the node's cached copy is read-only; writes go to the overlay
    before = open(image, "rb").read()
    backend = FullVmBackend(_settings(work_dir, guestkit_dir))
    sid = "vm-" + uuid.uuid4().hex[:8]
    await backend.start(sid, SandboxSpec(disk_image="user-disk:1", memory_mb=128), RootFs(boot_disk=BootDisk(image, DiskFormat.raw)))
    try:
        info = backend.describe(sid)
        assert (info["machine"], info["image_transport"], info["agent"]) == ("q35", "disk-image", "none")
        png = await backend.screenshot(sid)
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        with pytest.raises(Unsupported):  # no Corral agent inside a user's own disk
            await backend.exec(sid, ExecRequest(cmd="true"))
        overlay = os.path.join(backend.root, sid, "disk.qcow2")
        info = json.loads(subprocess.run(["qemu-img", "info", "-U", "--output=json", overlay], capture_output=True,
                                         text=True, check=True).stdout)
        assert info["backing-filename"] == image
    finally:
        await backend.stop(sid)
    assert open(image, "rb").read() == before
    assert not os.path.exists(os.path.join(backend.root, sid))


PREVIOUS_AGENT = """
import asyncio, sys
from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec
from corral_node_agent.backends.types import RootFs
from corral_node_agent.backends.vm.backend import MicroVmBackend
from corral_node_agent.settings import NodeAgentSettings

async def main(state_dir, guestkit_dir, node_id, sid, layer):
    backend = MicroVmBackend(NodeAgentSettings(node_id=node_id, state_dir=state_dir, guestkit_dir=guestkit_dir))
    await backend.start(sid, SandboxSpec(environment="busybox", backend="microvm", memory_mb=256), RootFs([layer]))
    await backend.write_file(sid, "/home/user/before-restart.txt", b"written by the previous agent")
    print("READY", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_restarted_agent_adopts_running_vms(work_dir, guestkit_dir, layers):
    """SIGKILL the agent that started a VM: QEMU (its own session) keeps running, and the next
    agent takes it over — same files, exec works, stop cleans up."""
    import sys

    from corral_node_agent.backends.vm.backend import MicroVmBackend

    settings = _settings(work_dir, guestkit_dir)
    sid = "vm-" + uuid.uuid4().hex[:8]
    previous = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PREVIOUS_AGENT, settings.state_dir, guestkit_dir, settings.node_id, sid, layers["blk"],
        stdout=asyncio.subprocess.PIPE)
    try:
        line = b""
        while line.strip() != b"READY":  # its log lines come first
            line = await asyncio.wait_for(previous.stdout.readline(), 120)
            assert line, "the previous agent exited before it was ready"
    finally:
        previous.kill()
        await previous.wait()
    directory = os.path.join(settings.state_dir, "vms", sid)
    assert len(_qemu_pids(directory)) == 1  # the VM outlived its agent

    backend = MicroVmBackend(settings)
    assert await backend.cleanup_orphans(adopt=True) == [sid]
    try:
        assert await backend.read_file(sid, "/home/user/before-restart.txt") == b"written by the previous agent"
        res = await backend.exec(sid, ExecRequest(cmd="echo adopted"))
        assert res.stdout.strip() == "adopted"
        await backend.pause(sid)
        await backend.resume(sid)
        assert (await backend.exec(sid, ExecRequest(cmd="true"))).exit_code == 0
    finally:
        await backend.stop(sid)
    assert _qemu_pids(directory) == [] and not os.path.exists(directory)
