"""The guest kit and guest agent on bare QEMU (no Corral backend): our own small launcher
boots the kit's kernel + initramfs over a busybox EROFS layer and talks to the agent with
GuestAgentClient. TCG here (kvm_pvm is not real KVM), so: three boots in all, one microvm
(virtio-blk) shared by most tests, one q35 (virtio-pmem + DAX, display), one that must fail.

Every test connects its own client to the shared VM: each one is also a reconnect.
"""

import asyncio
import base64
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

import pytest

from corral_common.contracts.exec import ExecRequest
from corral_node_agent.backends.vm import guestkit, keyboard
from corral_node_agent.backends.vm.agent_client import GuestAgentClient
from corral_node_agent.backends.vm.protocol import MARKER
from corral_node_agent.errors import BadInput, GuestLost, NotFound
from corral_node_agent.settings import NodeAgentSettings
from tests.polling import until

pytestmark = [pytest.mark.xdist_group("vm")]

_TOOLS = ("qemu-system-x86_64", "mkfs.erofs", "gcc", "apt-get", "dpkg-deb", "lz4", "depmod")
if os.geteuid() != 0:
    pytest.skip("VM guest tests need root", allow_module_level=True)
if missing := [t for t in _TOOLS if shutil.which(t) is None]:
    pytest.skip(f"VM guest tests need {', '.join(missing)} (see APT_PACKAGES in the Makefile)",
                allow_module_level=True)

BOOT_TIMEOUT_S = 90.0
PMEM_ALIGN = 2 << 20


def real_kvm() -> bool:
    """kvm_pvm (these machines) hangs stock guest kernels: only vmx/svm KVM counts."""
    if not os.path.exists("/dev/kvm") or os.path.exists("/sys/module/kvm_pvm"):
        return False
    with open("/proc/cpuinfo") as fh:
        flags = fh.read()
    return " vmx" in flags or " svm" in flags


@dataclass
class BareVm:
    proc: subprocess.Popen
    agent_socket: str
    qmp_socket: str
    console: str
    boot_to_hello_s: float = 0.0

    def console_text(self) -> str:
        with open(self.console, errors="replace") as fh:
            return fh.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def launch(kit: guestkit.GuestKit, workdir: str, *, machine: str, layer_args: list[str], lowers: list[str],
           memory: str = "256M", tty_shell: bool = False, incoming: str | None = None) -> BareVm:
    kvm = real_kvm()
    microvm = machine == "microvm"
    # PVH (the raw vmlinux) boots faster but leaves no VGA text console: displays get the bzImage.
    kernel = kit.display_kernel if tty_shell else kit.kernel
    bus = "device" if microvm else "pci"
    sock, qmp, console = f"{workdir}/agent.sock", f"{workdir}/qmp.sock", f"{workdir}/console.log"
    cmdline = guestkit.kernel_cmdline(lowers=lowers, upper_mb=64, hostname=f"{machine}-test", tty_shell=tty_shell,
                                      tcg=not kvm)
    argv = ["qemu-system-x86_64", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-M", "microvm,rtc=on,isa-serial=on,x-option-roms=off" if microvm else "q35",
            *(["-accel", "kvm", "-cpu", "host"] if kvm else ["-accel", "tcg,tb-size=64", "-cpu", "max"]),
            "-m", memory, "-smp", "1", "-serial", f"file:{console}", "-qmp", f"unix:{qmp},server=on,wait=off",
            "-kernel", kernel, "-initrd", kit.initramfs, "-append", cmdline,
            "-device", f"virtio-serial-{bus}",
            "-chardev", f"socket,id=agent,path={sock},server=on,wait=off",
            "-device", "virtserialport,chardev=agent,name=corral.agent", *layer_args]
    if tty_shell:
        argv += ["-vga", "std"]
    if incoming:
        argv += ["-incoming", incoming]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return BareVm(proc, sock, qmp, console)




def boot(vm: BareVm) -> BareVm:
    async def hello() -> None:
        client = await GuestAgentClient.connect(vm.agent_socket, timeout_s=BOOT_TIMEOUT_S)
        await client.close()

    started = time.monotonic()
    try:
        asyncio.run(hello())
    except Exception:  # noqa: BLE001 - whatever went wrong, the console tells why
        vm.stop()
        raise AssertionError(f"guest agent never answered; console:\n{vm.console_text()[-3000:]}") from None
    vm.boot_to_hello_s = time.monotonic() - started
    print(f"\nboot -> agent hello: {vm.boot_to_hello_s:.2f} s")
    return vm


@pytest.fixture(scope="module")
def kit() -> guestkit.GuestKit:
    started = time.monotonic()
    built = guestkit.build(NodeAgentSettings().guestkit_dir)
    print(f"\nguest kit ready in {time.monotonic() - started:.2f} s, initramfs "
          f"{os.path.getsize(built.initramfs) / 1e6:.2f} MB, kernel {built.kernel_format}")
    return built


@pytest.fixture(scope="module")
def workdir():
    path = tempfile.mkdtemp(prefix="corral-vm-guest-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def layers(workdir) -> dict[str, str]:
    """The busybox base layer twice: lz4hc-compressed (virtio-blk) and DAX-ready (pmem:
    uncompressed, no inline data, padded to 2 MiB)."""
    from corral_image_service.builders.busybox import build_busybox

    root = f"{workdir}/rootfs"
    build_busybox(root)
    with open(f"{root}/etc/corral-layer", "w") as fh:
        fh.write("busybox-base\n")
    blk, dax = f"{workdir}/base.erofs", f"{workdir}/base-dax.erofs"
    subprocess.run(["mkfs.erofs", "--quiet", "-zlz4hc", blk, root], check=True)
    subprocess.run(["mkfs.erofs", "--quiet", "-Enoinline_data", dax, root], check=True)
    os.truncate(dax, -(-os.path.getsize(dax) // PMEM_ALIGN) * PMEM_ALIGN)
    return {"blk": blk, "dax": dax}


def microvm_layer_args(layers) -> list[str]:
    return ["-drive", f"file={layers['blk']},format=raw,readonly=on,if=none,id=l0",
            "-device", "virtio-blk-device,drive=l0,serial=l0"]


@pytest.fixture(scope="module")
def microvm(kit, layers, workdir):
    vm_dir = f"{workdir}/microvm"
    os.mkdir(vm_dir)
    vm = boot(launch(kit, vm_dir, machine="microvm", lowers=["vd:l0"], layer_args=microvm_layer_args(layers)))
    yield vm
    vm.stop()


@pytest.fixture
async def agent(microvm):
    client = await GuestAgentClient.connect(microvm.agent_socket, timeout_s=30)
    yield client
    await client.close()


async def sh(client: GuestAgentClient, cmd: str, **kw):
    return await client.exec(ExecRequest(cmd=cmd, timeout_s=kw.pop("timeout_s", 30), **kw))


async def output_is(client: GuestAgentClient, cmd: str, expected: str) -> bool:
    return (await sh(client, cmd)).stdout == expected


# ---- exec -------------------------------------------------------------------------------


async def test_exec_exit_code_stdout_stderr(agent):
    started = time.monotonic()
    result = await sh(agent, "echo out; echo err >&2; exit 3")
    print(f"\nfirst exec round trip {1000 * (time.monotonic() - started):.1f} ms")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.timed_out and not result.truncated
    rtts = []
    for _ in range(5):
        started = time.monotonic()
        assert (await agent.exec(ExecRequest(cmd=["true"]))).exit_code == 0
        rtts.append(time.monotonic() - started)
    print(f"exec round trip (true), median of 5: {1000 * sorted(rtts)[2]:.1f} ms")
    missing = await agent.exec(ExecRequest(cmd=["/no/such/binary"]))
    assert missing.exit_code == 127 and "/no/such/binary" in missing.stderr


async def test_exec_output_cap_truncates_and_kills_the_writer(agent):
    result = await sh(agent, "yes", output_limit=1000, timeout_s=20)
    assert result.truncated and not result.timed_out
    assert result.stdout == "y\n" * 500
    assert result.exit_code == 128 + 13  # SIGPIPE: our read end was closed at the cap


async def test_exec_timeout_kills_the_process_group(agent):
    result = await sh(agent, "sleep 300 & sleep 301", timeout_s=1)
    assert result.timed_out and result.exit_code is None
    left = await sh(agent, "ps -o args | grep -c '^sleep 30[01]' || true")
    assert left.stdout.strip() == "0", left.stdout


async def test_exec_stdin_env_cwd(agent):
    assert (await sh(agent, "cat; echo", stdin="line one\nline two")).stdout == "line one\nline two\n"
    result = await sh(agent, 'echo "$GREETING|$HOME|$(pwd)"', env={"GREETING": "hi there"}, cwd="/tmp")
    assert result.stdout == "hi there|/home/user|/tmp\n"
    assert (await sh(agent, "pwd")).stdout == "/home/user\n"
    await sh(agent, "mkdir -p sub")
    assert (await sh(agent, "pwd", cwd="sub")).stdout == "/home/user/sub\n"


async def test_exec_default_cwd_without_a_home_is_tmp(agent):
    await sh(agent, "mv /home/user /home/user.away", user="root")
    try:
        assert (await sh(agent, "pwd")).stdout == "/tmp\n"
    finally:
        await sh(agent, "mv /home/user.away /home/user", user="root")


async def test_exec_user_and_root(agent):
    assert (await sh(agent, "id -u; id -g")).stdout == "1000\n1000\n"
    assert (await sh(agent, "id -u", user="root")).stdout == "0\n"
    denied = await sh(agent, "touch /etc/nope")
    assert denied.exit_code != 0


async def test_exec_stream_in_order(agent):
    chunks = [c async for c in agent.exec_stream(ExecRequest(
        cmd="echo a; sleep 0.3; echo b >&2; sleep 0.3; echo c", timeout_s=30))]
    assert [(c.type, c.data) for c in chunks[:-1]] == [("stdout", "a\n"), ("stderr", "b\n"), ("stdout", "c\n")]
    assert chunks[-1].type == "exit" and chunks[-1].result.exit_code == 0
    assert chunks[-1].result.stdout == "a\nc\n"


async def test_exec_output_that_is_not_utf8_comes_back_intact_as_base64(agent):
    mixed = "printf '\\377\\376abc\\n'; printf '\\303' >&2"  # not UTF-8; stderr ends mid-character
    text = await sh(agent, mixed)
    assert (text.encoding, text.stdout, text.stderr) == ("utf-8", "\ufffd\ufffdabc\n", "\ufffd")
    raw = await sh(agent, mixed, output_encoding="base64")
    assert raw.encoding == "base64"
    assert (base64.b64decode(raw.stdout), base64.b64decode(raw.stderr)) == (b"\xff\xfeabc\n", b"\xc3")
    blob = bytes(range(256)) * 400  # every byte value, 100 KiB: several output frames
    await agent.write_file("blob.bin", blob)
    capped = await sh(agent, "cat blob.bin", output_encoding="base64", output_limit=1000)
    assert capped.truncated and base64.b64decode(capped.stdout) == blob[:1000]  # the cap counts raw bytes
    chunks = [c async for c in agent.exec_stream(ExecRequest(cmd="cat blob.bin", timeout_s=30,
                                                             output_encoding="base64"))]
    out = [c for c in chunks if c.type == "stdout"]
    assert {c.encoding for c in out} == {"base64"}
    assert b"".join(base64.b64decode(c.data, validate=True) for c in out) == blob  # each chunk on its own
    result = chunks[-1].result
    assert result.encoding == "base64" and base64.b64decode(result.stdout) == blob and not result.truncated


async def test_concurrent_execs_share_the_port(agent):
    """The first command can only finish once the second has run: serialised execs would
    time out."""
    flag = f"/tmp/flag-{os.getpid()}-{time.monotonic_ns()}"
    waiter = asyncio.ensure_future(sh(agent, f"while [ ! -e {flag} ]; do sleep 0.05; done; echo waited",
                                      timeout_s=20))
    setter = await sh(agent, f"touch {flag}; echo set")
    waited = await waiter
    assert setter.stdout == "set\n"
    assert waited.stdout == "waited\n" and not waited.timed_out


# ---- files -------------------------------------------------------------------------------


async def test_files_write_read_stat_list(agent):
    payload = bytes(range(256)) * 12289  # ~3 MiB, every byte value: several frames each way
    assert await agent.write_file("deep/er/data.bin", payload, mode=0o600) == len(payload)
    assert await agent.read_file("/home/user/deep/er/data.bin") == payload
    info = await agent.stat("deep/er/data.bin")
    assert (info.path, info.type, info.size, info.mode) == ("/home/user/deep/er/data.bin", "file", len(payload), 0o600)
    owners = await sh(agent, "stat -c '%u:%g %a' /home/user/deep /home/user/deep/er/data.bin")
    assert owners.stdout == "1000:1000 755\n1000:1000 600\n"

    async def pieces():
        for part in (b"streamed ", b"upload", b"!\n", b"\n"):  # base64 with no, one and two "="
            yield part

    assert await agent.write_file("/tmp/streamed.txt", pieces()) == 18
    size, chunks = await agent.open_file("/tmp/streamed.txt")
    assert size == 18 and b"".join([c async for c in chunks]) == b"streamed upload!\n\n"
    names = {(e.name, e.type) for e in await agent.list_dir("/home/user/deep")}
    assert names == {("er", "dir")}
    listing = await agent.list_dir("/")
    assert {"bin", "etc", "home", "proc"} <= {e.name for e in listing}
    assert next(e for e in listing if e.name == "etc").path == "/etc"
    assert (await agent.stat("/bin/sh")).type == "symlink"
    assert (await agent.read_file("/etc/corral-layer")) == b"busybox-base\n"


async def test_file_errors_match_containers(agent):
    with pytest.raises(NotFound):
        await agent.read_file("/no/such/file")
    with pytest.raises(NotFound):
        await agent.stat("/home/user/missing")
    with pytest.raises(NotFound):
        await agent.list_dir("/nowhere")
    with pytest.raises(BadInput, match="is a directory"):
        await agent.open_file("/etc")
    with pytest.raises(BadInput, match="not a directory"):
        await agent.list_dir("/etc/passwd")
    with pytest.raises(BadInput, match="symbolic links"):
        await agent.read_file("/bin/sh")
    with pytest.raises(BadInput, match=r"\.\."):
        await agent.read_file("../etc/passwd")


# ---- reconnects ------------------------------------------------------------------------


async def test_host_disconnect_mid_exec_then_reconnect(microvm):
    first = await GuestAgentClient.connect(microvm.agent_socket, timeout_s=30)
    stream = first.exec_stream(ExecRequest(cmd="echo started; sleep 302", timeout_s=600))
    assert (await stream.__anext__()).data == "started\n"
    next_chunk = asyncio.ensure_future(stream.__anext__())
    await first.close()
    with pytest.raises(GuestLost):
        await asyncio.wait_for(next_chunk, 5)  # fails at once, never hangs

    # A host that vanished halfway through a frame: the next one's marker resyncs the guest.
    _reader, writer = await asyncio.open_unix_connection(microvm.agent_socket)
    writer.write(MARKER + (1000).to_bytes(4, "big") + b'{"id":1,"op":')
    await writer.drain()
    writer.close()
    await writer.wait_closed()

    second = await GuestAgentClient.connect(microvm.agent_socket, timeout_s=30)
    try:
        result = await second.exec(ExecRequest(cmd="ps -o args | grep -c '^sleep 302' || true"))
        assert result.stdout == "0\n"  # the old session's command was killed with it
        await second.ping()
    finally:
        await second.close()


async def test_snapshot_restore_in_a_new_qemu_resyncs_the_same_agent(microvm, kit, layers, workdir):
    """The guest goes on in another QEMU process with the same agent: the new host's
    handshake resyncs it, the old session's command is gone, files and background
    processes are kept. The restored VM replaces the shared one for the tests after this."""
    from qemu.qmp import QMPClient

    old = await GuestAgentClient.connect(microvm.agent_socket, timeout_s=30)
    await old.write_file("/tmp/kept.txt", b"kept\n")
    await sh(old, "(while true; do date >> /tmp/ticks; sleep 0.2; done >/dev/null 2>&1 &)")
    stream = old.exec_stream(ExecRequest(cmd="echo go; sleep 303", timeout_s=600))
    assert (await stream.__anext__()).data == "go\n"
    qmp = QMPClient("snapshot")
    await qmp.connect(microvm.qmp_socket)
    image = f"{workdir}/snapshot.bin"
    await qmp.execute("stop")
    await qmp.execute("migrate", {"uri": f"exec:cat > {image}"})
    await until(lambda: status_is(qmp, "completed"), 60, "the snapshot to complete")
    await qmp.disconnect()
    microvm.stop()
    await old.close()

    restored_dir = f"{workdir}/restored"
    os.mkdir(restored_dir)
    restored = launch(kit, restored_dir, machine="microvm", lowers=["vd:l0"], layer_args=microvm_layer_args(layers),
                      incoming=f"exec:cat {image}")
    microvm.proc, microvm.agent_socket, microvm.qmp_socket, microvm.console = (
        restored.proc, restored.agent_socket, restored.qmp_socket, restored.console)
    qmp = QMPClient("restore")
    await until(lambda: connects(qmp, restored.qmp_socket), 30, "QMP of the restored VM")
    await until(lambda: status_is(qmp, "completed"), 60, "the incoming migration")
    await qmp.execute("cont")
    await qmp.disconnect()
    started = time.monotonic()
    new = await GuestAgentClient.connect(restored.agent_socket, timeout_s=60)
    try:
        assert await new.read_file("/tmp/kept.txt") == b"kept\n"
        print(f"\nrestore: cont -> first answer {1000 * (time.monotonic() - started):.0f} ms")
        assert (await sh(new, "ps -o args | grep -c '^sleep 303' || true")).stdout == "0\n"
        ticks = int((await sh(new, "wc -l < /tmp/ticks")).stdout)
        await until(lambda: more_ticks(new, ticks), 30, "the background loop to go on")
    finally:
        await new.close()


async def status_is(qmp, status: str) -> bool:
    return (await qmp.execute("query-migrate")).get("status") == status


async def connects(qmp, path: str) -> bool:
    try:
        await qmp.connect(path)
    except Exception:  # noqa: BLE001 - not listening yet
        return False
    return True


async def more_ticks(client, before: int) -> bool:
    return int((await sh(client, "wc -l < /tmp/ticks")).stdout) > before


async def test_zz_shutdown_ends_qemu(microvm):
    client = await GuestAgentClient.connect(microvm.agent_socket, timeout_s=30)
    await client.shutdown()
    await until(lambda: microvm.proc.poll() is not None, 30, "QEMU to exit")
    assert microvm.proc.returncode == 0


# ---- q35: virtio-pmem + DAX, display ---------------------------------------------------


async def test_q35_pmem_dax_root_and_display_keyboard(kit, layers, workdir):
    from qemu.qmp import QMPClient

    vm_dir = f"{workdir}/q35"
    os.mkdir(vm_dir)
    size = os.path.getsize(layers["dax"])
    vm = launch(kit, vm_dir, machine="q35", lowers=["pmem0"], memory="256M,slots=1,maxmem=1G", tty_shell=True,
                layer_args=["-object", f"memory-backend-file,id=pm0,share=on,readonly=on,mem-path={layers['dax']},"
                                       f"size={size}", "-device", "virtio-pmem-pci,memdev=pm0"])
    started = time.monotonic()
    try:
        client = await GuestAgentClient.connect(vm.agent_socket, timeout_s=BOOT_TIMEOUT_S)
        print(f"\nq35 boot -> agent hello: {time.monotonic() - started:.2f} s")
        try:
            assert await client.read_file("/.corral/layers") == b"0 pmem0 dax\n"
            assert await client.read_file("/etc/corral-layer") == b"busybox-base\n"
            # tty1 shell is up before we type (the agent starts it before answering)
            await until(lambda: output_is(client, "ps -o args | grep -q '^sh -i' && echo up", "up\n"), 30,
                        "the tty1 shell")

            qmp = QMPClient("guest-test")
            await qmp.connect(vm.qmp_socket)
            try:
                before = f"{vm_dir}/before.ppm"
                await qmp.execute("screendump", {"filename": before})
                # The PS/2 controller's queue is 16 bytes and drops what overflows it, also when
                # a loaded TCG guest reads slower than keys arrive: paced as the backend paces
                # them (groups that fit, each read by the guest before the next: keyboard.py).
                async def send(events: list) -> None:
                    await qmp.execute("input-send-event", {"events": events})

                async def keyboard_irqs() -> int | None:
                    return keyboard.parse_keyboard_irqs((await client.read_file("/proc/interrupts")).decode())

                await keyboard.send_paced(send, [
                    [{"type": "key", "data": {"down": down, "key": {"type": "qcode", "data": code}}}
                     for down in (True, False)]
                    for code in ({" ": "spc", "/": "slash", "\n": "ret"}.get(ch, ch) for ch in "touch /tmp/typed\n")],
                    keyboard_irqs)
                # The keys reached the shell on tty1 if the command they typed ran.
                await until(lambda: output_is(client, "test -e /tmp/typed && echo yes", "yes\n"), 30,
                            "the typed command to run")
                after = f"{vm_dir}/after.ppm"
                await qmp.execute("screendump", {"filename": after})
                with open(before, "rb") as a, open(after, "rb") as b:
                    assert a.read() != b.read()
            finally:
                await qmp.disconnect()
            await client.shutdown()
        finally:
            await client.close()
        await until(lambda: vm.proc.poll() is not None, 30, "QEMU to exit")
    finally:
        vm.stop()


# ---- a root that cannot be built -------------------------------------------------------


async def test_bad_layer_reports_init_error_and_powers_off(kit, layers, workdir):
    vm_dir = f"{workdir}/broken"
    os.mkdir(vm_dir)
    vm = launch(kit, vm_dir, machine="microvm", lowers=["vd:nosuchdisk"],
                layer_args=["-drive", f"file={layers['blk']},format=raw,readonly=on,if=none,id=l0",
                            "-device", "virtio-blk-device,drive=l0,serial=l0"])
    try:
        await until(lambda: vm.proc.poll() is not None, BOOT_TIMEOUT_S, "the broken guest to power off")
        assert "CORRAL-INIT-ERROR: layer 0: no virtio disk with serial nosuchdisk" in vm.console_text()
    finally:
        vm.stop()
