"""ContainerBackend against real crun, on a busybox EROFS layer."""

import asyncio
import base64
import os
import shutil
import signal
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest
import pytest_asyncio

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec
from corral_host import loopdev, mounts
from corral_host.cgroups.mounts import cgroup_mounts
from corral_host.cgroups.v1 import V1Driver
from corral_node_agent.backends.base import ExitReason
from corral_node_agent.backends.container import ContainerBackend, oci
from corral_node_agent.backends.types import RootFs
from corral_node_agent.capacity import open_files
from corral_node_agent.errors import BadInput, Conflict, NotFound, StartFailed, TooLarge
from corral_node_agent.settings import NodeAgentSettings
from tests.integration.node_agent.sandbox_paths import root_of
from tests.polling import until

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def backend(state_dir, node_id, base_layer):
    settings = NodeAgentSettings(node_id=node_id, state_dir=state_dir, output_limit_bytes=1 << 20,
                                 max_upload_bytes=4 << 20)
    b = ContainerBackend(settings)
    b.exits = []
    b.on_exit = lambda sid, reason, usage: b.exits.append((sid, reason, usage))
    yield b
    await b.close()


async def started(backend, base_layer, **spec) -> str:
    sid = "t-" + uuid.uuid4().hex[:10]
    spec.setdefault("memory_mb", 128)
    spec.setdefault("disk_mb", 64)
    spec.setdefault("pids_limit", 64)
    await backend.start(sid, SandboxSpec(environment="busybox", **spec), RootFs([base_layer]))
    return sid


def run(cmd, **kw) -> ExecRequest:
    kw.setdefault("timeout_s", 10)
    return ExecRequest(cmd=cmd, **kw)


async def test_exec_identity_env_cwd_stdin(backend, base_layer):
    sid = await started(backend, base_layer, env={"FOO": "bar"})
    r = await backend.exec(sid, run("echo out; echo err >&2; exit 3"))
    assert (r.stdout, r.stderr, r.exit_code, r.timed_out, r.truncated) == ("out\n", "err\n", 3, False, False)
    r = await backend.exec(sid, run("id -u; id -g; hostname; pwd; echo $FOO $BAZ $HOME"
                                    , env={"BAZ": "qux"}))
    assert r.stdout.split("\n")[:5] == ["1000", "1000", sid, "/home/user", "bar qux /home/user"]
    r = await backend.exec(sid, run(["cat"], stdin="hello\nworld"))
    assert r.stdout == "hello\nworld"
    r = await backend.exec(sid, run("pwd", cwd="/tmp"))
    assert r.stdout == "/tmp\n"
    r = await backend.exec(sid, run("grep CapEff /proc/self/status"))
    assert r.stdout.split()[1] == "0000000000000000"
    r = await backend.exec(sid, run("id -u", user="root"))
    assert r.stdout == "0\n"
    r = await backend.exec(sid, run(["/no/such/binary"]))
    assert r.exit_code != 0


async def test_no_network(backend, base_layer):
    sid = await started(backend, base_layer)
    r = await backend.exec(sid, run("ls /sys/class/net"))
    assert r.stdout.split() == ["lo"]
    r = await backend.exec(sid, run("nc -w 1 1.1.1.1 80 </dev/null"))
    assert r.exit_code != 0
    assert "unreachable" in r.stderr.lower()


async def test_timeout_kills_and_sandbox_survives(backend, base_layer):
    sid = await started(backend, base_layer)
    t = time.monotonic()
    r = await backend.exec(sid, run("sleep 30 & sleep 31; echo never", timeout_s=0.5))
    assert r.timed_out and r.exit_code is None and "never" not in r.stdout
    assert time.monotonic() - t < 3

    async def gone() -> bool:
        return (await backend.exec(sid, run("ps -o args | grep -c '^sleep 3[01]' || true"))).stdout.strip() == "0"

    # SIGKILLed at once; the sandbox's init reaps them a moment later.
    await until(gone, 10, "the timed-out command and its children to be gone", 0.02)


async def test_the_init_reaps_what_commands_leave_behind(backend, base_layer):
    # PID 1 is the node's catatonit in pause mode (oci.INIT_ARGS): the orphans of every
    # command are re-parented to it and must not stay zombies (they count against pids_limit).
    sid = await started(backend, base_layer)
    assert (await backend.exec(sid, run("ps -o pid,args | sed -n 2p"))).stdout.split() == ["1", "/dev/init", "-P"]
    for _ in range(3):
        await backend.exec(sid, run("(sleep 0.05 &) ; (true &)"))

    async def reaped() -> bool:
        states = (await backend.exec(sid, run("cat /proc/[0-9]*/stat | cut -d' ' -f3"))).stdout.split()
        return "Z" not in states

    await until(reaped, 10, "the orphans to be reaped", 0.02)
    await backend.stop(sid)


async def test_an_image_without_a_shell_starts(backend, work_dir, tmp_path):
    # The init comes from the node: an image needs no /bin/sh (distroless ones have none).
    root = tmp_path / "root"
    (root / "opt").mkdir(parents=True)
    shutil.copy("/bin/busybox", root / "opt" / "busybox")  # (no applet links)
    image, mnt = tmp_path / "noshell.erofs", tmp_path / "noshell"
    subprocess.run(["mkfs.erofs", str(image), str(root)], check=True, capture_output=True)
    mnt.mkdir()
    mounts.mount_erofs(str(image), str(mnt))
    try:
        sid = "t-" + uuid.uuid4().hex[:10]
        await backend.start(sid, SandboxSpec(environment="noshell", memory_mb=64, disk_mb=16, pids_limit=16),
                            RootFs([str(mnt)]))
        result = await backend.exec(sid, run(["/opt/busybox", "echo", "no shell here"]))
        assert (result.exit_code, result.stdout) == (0, "no shell here\n"), result
        assert (await backend.exec(sid, run(["/opt/busybox", "test", "-e", "/bin/sh"]))).exit_code == 1
        await backend.stop(sid)
    finally:
        mounts.umount(str(mnt))


async def test_yes_is_capped_and_quick(backend, base_layer):
    sid = await started(backend, base_layer)
    t = time.monotonic()
    r = await backend.exec(sid, run("yes", output_limit=1000))
    assert r.truncated and len(r.stdout) == 1000 and not r.timed_out
    assert time.monotonic() - t < 3
    r = await backend.exec(sid, run("yes | head -c 5000 >&2; echo ok", output_limit=100))
    assert r.stdout == "ok\n" and len(r.stderr) == 100 and r.truncated


async def test_memory_limit_oom(backend, base_layer):
    sid = await started(backend, base_layer, memory_mb=32)
    r = await backend.exec(sid, run("awk 'BEGIN { s = \"x\"; while (1) s = s s }'", timeout_s=20))
    assert r.oom_killed and r.exit_code == 137
    assert backend.usage(sid).oom_kills >= 1
    r = await backend.exec(sid, run("echo alive"))
    assert r.stdout == "alive\n"


async def test_fork_bomb_hits_pids_limit(backend, base_layer):
    sid = await started(backend, base_layer, pids_limit=32)
    pids_dir = V1Driver().cgroup(f"/corral/{backend.settings.node_id}/{sid}").dirs["pids"]
    await backend.exec(sid, run("b() { b | b & }; b", timeout_s=2))
    current = int((pids_dir / "pids.current").read_text())
    assert current <= 32
    usage = await backend.stop(sid)
    assert usage.wall_time_s > 0
    assert not os.path.exists(pids_dir)


async def test_disk_cap(backend, base_layer):
    sid = await started(backend, base_layer, disk_mb=16, memory_mb=256)
    r = await backend.exec(sid, run("dd if=/dev/zero of=/home/user/big bs=1M count=64"))
    assert r.exit_code != 0 and "No space left on device" in r.stderr
    with pytest.raises(TooLarge):
        await backend.write_file(sid, "more", b"x" * (2 << 20))
    assert (await backend.exec(sid, run("test -e more"))).exit_code != 0


async def test_dev_shm_is_on_the_sandboxs_disk(backend, base_layer):
    sid = await started(backend, base_layer, disk_mb=16, memory_mb=256)
    r = await backend.exec(sid, run("dd if=/dev/zero of=/dev/shm/big bs=1M count=64"))
    assert r.exit_code != 0 and "No space left on device" in r.stderr
    r = await backend.exec(sid, run("rm /dev/shm/big; echo x > /dev/shm/f && stat -c %a /dev/shm && cat /dev/shm/f"))
    assert r.stdout == "1777\nx\n", r.stderr
    # Device nodes open on the disk (its /dev is there), but even the sandbox's root makes none,
    # and the node's shared /sys is read-only.
    r = await backend.exec(sid, run("mknod /dev/shm/sda b 8 0 || echo no-block; mknod /dev/mem2 c 1 1 || echo no-char; "
                                    "echo 1 > /sys/kernel/mm/ksm/run 2>/dev/null || echo sys-ro", user="root"))
    assert r.stdout.split() == ["no-block", "no-char", "sys-ro"], r.stdout + r.stderr


def _filesystems(pid: int) -> dict[str, tuple[str, str]]:
    """A process's mounts: mount point -> (device number, filesystem type)."""
    out = {}
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        out[fields[4]] = (fields[2], fields[fields.index("-") + 1])
    return out


async def test_a_sandbox_brings_six_filesystems_and_binds_the_nodes_shared_ones(backend, base_layer):
    # Every superblock costs every memory cgroup kernel memory (shared_mounts.py): a
    # sandbox's own are its disk, overlay, proc, devpts, mqueue and crun's /sys/fs/cgroup
    # tmpfs; /sys and the masked directories are one node-wide mount each.
    sids = [await started(backend, base_layer) for _ in range(2)]
    mounts = [_filesystems(int(Path(backend.sandboxes_dir, sid, "init.pid").read_text())) for sid in sids]
    node = {dev for dev, _ in _filesystems(os.getpid()).values()}
    own = [{dev: fstype for dev, fstype in m.values() if dev not in node} for m in mounts]
    assert sorted(own[0].values()) == ["devpts", "ext4", "mqueue", "overlay", "proc", "tmpfs"], own[0]
    assert not set(own[0]) & set(own[1])  # nothing of one sandbox's is the other's
    shared = [p for p in ("/sys", "/proc/acpi", "/sys/firmware") if os.path.isdir(p)]
    assert "/sys" in shared and all(mounts[0][p] == mounts[1][p] for p in shared)
    assert mounts[0]["/dev"] == mounts[0]["/dev/shm"] and mounts[0]["/dev"][1] == "ext4"
    masked = " ".join(p for p in shared if p != "/sys")
    for sid in sids:  # the masks still read empty; /sys shows a network of just lo, as the sandbox's own
        r = await backend.exec(sid, run(f"for d in {masked}; do ls -A $d | wc -l; done; ls /sys/class/net"))
        assert r.stdout.split() == ["0"] * (len(shared) - 1) + ["lo"], r.stdout


async def test_files_roundtrip(backend, base_layer):
    sid = await started(backend, base_layer)
    n = await backend.write_file(sid, "dir/sub/hello.txt", b"hi there", mode=0o600)
    assert n == 8
    assert await backend.read_file(sid, "/home/user/dir/sub/hello.txt") == b"hi there"

    async def gen():
        for i in range(3):
            yield f"part{i};".encode()

    await backend.write_file(sid, "/tmp/streamed", gen())
    r = await backend.exec(sid, run("cat /tmp/streamed; echo; stat -c '%u:%g %a' /tmp/streamed dir dir/sub/hello.txt"))
    assert r.stdout == "part0;part1;part2;\n1000:1000 644\n1000:1000 755\n1000:1000 600\n"
    await backend.exec(sid, run("echo from-sandbox > made.txt; ln -s made.txt link"))
    assert await backend.read_file(sid, "made.txt") == b"from-sandbox\n"
    entries = {e.name: e for e in await backend.list_dir(sid, "/home/user")}
    assert entries["dir"].type == "dir" and entries["link"].type == "symlink"
    assert entries["made.txt"].type == "file" and entries["made.txt"].size == 13
    assert entries["made.txt"].path == "/home/user/made.txt"
    with pytest.raises(NotFound):
        await backend.read_file(sid, "nope")
    with pytest.raises(BadInput):
        await backend.read_file(sid, "dir")
    with pytest.raises(TooLarge):
        await backend.write_file(sid, "huge", b"x" * ((4 << 20) + 1))


async def test_symlink_escape_refused(backend, base_layer, state_dir):
    sid = await started(backend, base_layer)
    tmp_path = Path(state_dir) / "host-side"
    tmp_path.mkdir()
    secret = tmp_path / "host-secret"
    secret.write_text("host only")
    await backend.exec(sid, run(f"ln -s / rootlink; ln -s {secret} secret; ln -s /etc etclink"))
    for path in ("secret", f"rootlink{secret}", "etclink/passwd", "../user/x", "/home/user/../../etc/passwd",
                 "a\0b"):
        with pytest.raises(BadInput) as exc:
            await backend.read_file(sid, path)
        assert exc.value.loc == ["query", "path"]
    with pytest.raises(BadInput):
        await backend.write_file(sid, f"rootlink{tmp_path}/planted", b"x")
    with pytest.raises(BadInput):
        await backend.write_file(sid, "secret", b"overwritten")
    with pytest.raises(BadInput):
        await backend.list_dir(sid, "rootlink")
    assert not (tmp_path / "planted").exists()
    assert secret.read_text() == "host only"
    await backend.exec(sid, run("mkfifo fifo"))
    with pytest.raises(BadInput):
        await asyncio.wait_for(backend.read_file(sid, "fifo"), 2)


async def test_exec_stream(backend, base_layer):
    sid = await started(backend, base_layer)
    chunks = [c async for c in backend.exec_stream(sid, run("echo a; sleep 0.2; echo b >&2; exit 4"))]
    assert chunks[-1].type == "exit" and chunks[-1].result.exit_code == 4
    out = "".join(c.data for c in chunks if c.type == "stdout")
    err = "".join(c.data for c in chunks if c.type == "stderr")
    assert (out, err) == ("a\n", "b\n")
    assert chunks[-1].result.stdout == "a\n"


async def test_output_that_is_not_utf8_comes_back_intact_as_base64(backend, base_layer):
    sid = await started(backend, base_layer)
    mixed = "printf '\\377\\376abc\\n'; printf '\\303' >&2"  # not UTF-8; stderr ends mid-character
    text = await backend.exec(sid, run(mixed))
    assert (text.encoding, text.stdout, text.stderr) == ("utf-8", "\ufffd\ufffdabc\n", "\ufffd")  # as always
    raw = await backend.exec(sid, run(mixed, output_encoding="base64"))
    assert raw.encoding == "base64" and not raw.truncated
    assert (base64.b64decode(raw.stdout), base64.b64decode(raw.stderr)) == (b"\xff\xfeabc\n", b"\xc3")

    blob = bytes(range(256)) * 400  # every byte value, 100 KiB: more than one 64 KiB pipe read
    await backend.write_file(sid, "blob.bin", blob)
    cat = await backend.exec(sid, run(["cat", "blob.bin"], output_encoding="base64"))
    assert base64.b64decode(cat.stdout, validate=True) == blob and not cat.truncated
    capped = await backend.exec(sid, run(["cat", "blob.bin"], output_encoding="base64", output_limit=1000))
    assert capped.truncated and base64.b64decode(capped.stdout) == blob[:1000]  # the cap counts raw bytes

    chunks = [c async for c in backend.exec_stream(sid, run("cat blob.bin; printf '\\377' >&2",
                                                            output_encoding="base64"))]
    out = [c for c in chunks if c.type == "stdout"]
    assert len(out) >= 2 and {c.encoding for c in chunks[:-1]} == {"base64"}
    # each chunk is the base64 of its own bytes (validate: no padding in the middle)
    assert b"".join(base64.b64decode(c.data, validate=True) for c in out) == blob
    assert [base64.b64decode(c.data) for c in chunks if c.type == "stderr"] == [b"\xff"]
    result = chunks[-1].result
    assert result.encoding == "base64" and base64.b64decode(result.stdout) == blob and result.exit_code == 0


async def test_stop_leaves_nothing(backend, base_layer):
    sid = await started(backend, base_layer)
    bundle = f"{backend.sandboxes_dir}/{sid}"
    image = f"{bundle}/upper.img"
    # Running: its disk is bound to a loop device and mounted only in the container's namespace.
    assert loopdev.devices_backed_by(image)
    assert not any(m.startswith(bundle) for m in mounts.mountpoints())
    usage = await backend.stop(sid)
    assert usage.wall_time_s > 0 and usage.peak_memory_bytes > 0
    assert not any(m.startswith(bundle) for m in mounts.mountpoints())
    # Released everywhere: the loop device let go of the (deleted) image.
    await until(lambda: not loopdev.devices_backed_by(image), timeout_s=10, what="the disk's loop device to clear")
    assert not os.path.exists(bundle)
    cg = V1Driver()
    for mnt in set(cg.mounts.values()) | {cg.stray_root}:
        assert not os.path.exists(f"{mnt}/corral/{backend.settings.node_id}/{sid}"), mnt
    assert await backend.stop(sid) == usage  # idempotent
    assert (await backend.stop("never-existed")).cpu_seconds == 0
    with pytest.raises(NotFound):
        await backend.exec(sid, run("true"))


async def test_a_running_sandbox_holds_at_most_its_share_of_the_agents_descriptors(backend, base_layer):
    # RLIMIT_NOFILE bounds a node's sandboxes at (limit - reserve) / FDS_PER_SANDBOX
    # (capacity/open_files.py): what a sandbox keeps open after its start, its execs, file calls and memory
    # samples must stay within that, or a dense node fails starts with EMFILE.
    from corral_node_agent.memory.accounting import MemoryAccounting

    accounting = MemoryAccounting(V1Driver(), backend.settings.node_id)
    await started(backend, base_layer)  # the node's own, opened once: the disk pool, shared mounts
    before = len(os.listdir("/proc/self/fd"))
    sids = [await started(backend, base_layer) for _ in range(4)]
    for sid in sids:
        assert (await backend.exec(sid, run("echo hi > /tmp/f; cat /tmp/f"))).stdout == "hi\n"
        assert await backend.read_file(sid, "/tmp/f") == b"hi\n"
        await backend.write_file(sid, "/tmp/g", b"x")
        await backend.list_dir(sid, "/tmp")
    accounting.sample(sids)
    accounting.sample(sids)
    held = len(os.listdir("/proc/self/fd")) - before
    assert held <= len(sids) * open_files.FDS_PER_SANDBOX, (held, sorted(os.listdir("/proc/self/fd")))
    for sid in sids:
        accounting.forget(sid)
        await backend.stop(sid)
    assert len(os.listdir("/proc/self/fd")) <= before  # and none outlives its sandbox


async def test_crun_sets_a_sandbox_up_outside_its_cpu_cap(backend, base_layer):
    # crun's setup runs in the sandbox's cgroup (namespaces, mounts, pivot_root, seccomp: a few
    # ms of cpu). Capped by crun, a sandbox at the kernel's smallest quota (1 ms a period) was
    # throttled through periods of its own start (2 on a quiet host, 8 in a density run);
    # capped by the backend once crun is done, none (at most its init's first fork may meet it).
    cpu_root = V1Driver().mounts.get("cpu")
    if cpu_root is None:
        pytest.skip("no cgroup v1 cpu hierarchy (the v2 driver's cap is tests/integration/node_agent/vm)")
    sid = await started(backend, base_layer, cpu=0.001)
    cg = Path(f"{cpu_root}/corral/{backend.settings.node_id}/{sid}")
    stat = dict(line.split() for line in (cg / "cpu.stat").read_text().splitlines())
    assert int((cg / "cpu.cfs_quota_us").read_text()) == 1000
    assert int(stat["nr_throttled"]) <= 1, stat
    await backend.stop(sid)


async def test_a_start_that_hangs_is_killed_at_its_deadline_and_leaves_nothing(backend, base_layer, monkeypatch):
    # A `crun run` that never returns (a kernel stall, a runtime bug; here a prestart hook that
    # sleeps, run by the real crun) fails the start at container_start_timeout_s instead of
    # leaving the sandbox "starting": crun, what it forked and the half-made container killed,
    # its cgroup, bundle and crun state gone; the node starts the next sandbox as before.
    mark = uuid.uuid4().hex
    build_config = oci.build_config

    def with_hanging_hook(*args, **kwargs):
        config = build_config(*args, **kwargs)
        config["hooks"] = {"prestart": [{"path": "/bin/sleep", "args": ["sleep", "600"],
                                         "env": [f"CORRAL_TEST_MARK={mark}"]}]}
        return config

    monkeypatch.setattr(oci, "build_config", with_hanging_hook)
    monkeypatch.setattr(backend.settings, "container_start_timeout_s", 1.0)
    sid = "t-" + uuid.uuid4().hex[:10]
    with pytest.raises(StartFailed, match="did not finish within 1 s"):
        await backend.start(sid, SandboxSpec(environment="busybox", memory_mb=128, disk_mb=64, pids_limit=64),
                            RootFs([base_layer]))
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and mark.encode() in _environ(pid)]
    assert sid not in backend.list_running() and sid not in await backend.crun.list()
    assert not os.path.exists(f"{backend.sandboxes_dir}/{sid}")
    assert not [m.point for m in cgroup_mounts() if os.path.exists(f"{m.point}/corral/{backend.settings.node_id}/{sid}")]
    monkeypatch.undo()
    after = await started(backend, base_layer)
    assert (await backend.exec(after, run("echo up"))).stdout == "up\n"
    await backend.stop(after)


def _environ(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read()
    except OSError:  # gone, or a kernel thread
        return b""


async def test_a_cpu_cap_lets_the_sandbox_bank_one_period_of_what_it_leaves_unused(backend, base_layer):
    # CFS burst (cgroups.base.cpu_burst_us), which crun does not set: starting a command costs
    # ~1 ms of cpu inside the sandbox's cgroup, a whole period's quota at the smallest caps, so
    # without a bank the second of two commands in a row waited out the period (~100 ms).
    cpu_root = V1Driver().mounts.get("cpu")
    if cpu_root is None or not os.path.exists(f"{cpu_root}/cpu.cfs_burst_us"):
        pytest.skip("the kernel has no CFS burst (Linux 5.14+) or no cpu hierarchy")
    small = await started(backend, base_layer, cpu=0.001)  # below the kernel's minimum quota: 1 ms
    large = await started(backend, base_layer, cpu=1.5)
    for sid, quota in ((small, 1000), (large, 150_000)):
        cg = Path(f"{cpu_root}/corral/{backend.settings.node_id}/{sid}")
        assert int((cg / "cpu.cfs_quota_us").read_text()) == quota
        assert int((cg / "cpu.cfs_burst_us").read_text()) == quota
        for _ in range(3):
            assert (await backend.exec(sid, run("true"))).exit_code == 0
        await backend.stop(sid)


async def test_running_sandboxes_are_mounted_nowhere_in_the_agents_namespace(backend, base_layer, tmp_path):
    # Every crun run copies the agent's mount namespace: mounts kept there per sandbox would
    # make each create slower the more the node runs. Files and commit still reach them.
    sids = [await started(backend, base_layer) for _ in range(3)]
    assert not [m for m in mounts.mountpoints() if m.startswith(backend.sandboxes_dir)]
    for i, sid in enumerate(sids):
        await backend.write_file(sid, "/home/user/mine.txt", f"sandbox {i}\n".encode())
        await backend.exec(sid, run("mkdir -p /home/user/made && echo inside > /home/user/made/f"))
    for i, sid in enumerate(sids):
        assert await backend.read_file(sid, "/home/user/mine.txt") == f"sandbox {i}\n".encode()
        assert (await backend.exec(sid, run("cat /home/user/mine.txt"))).stdout == f"sandbox {i}\n"
        assert [f.name for f in await backend.list_dir(sid, "/home/user/made")] == ["f"]
        assert (await backend.stat(sid, "/home/user/made/f")).size == len("inside\n")
    out = tmp_path / "diff.tar"
    await backend.commit_diff(sids[1], str(out))
    with tarfile.open(out) as tf:
        names = tf.getnames()
        assert "home/user/made/f" in names and tf.extractfile("home/user/mine.txt").read() == b"sandbox 1\n"
    # A sandbox being stopped answers no file call (its descriptors are about to close).
    await backend.stop(sids[0])
    with pytest.raises(NotFound):
        await backend.read_file(sids[0], "/home/user/mine.txt")
    assert await backend.read_file(sids[2], "/home/user/mine.txt") == b"sandbox 2\n"


async def test_init_death_and_timeout_reported(backend, base_layer):
    sid = await started(backend, base_layer)
    os.kill(backend._sandboxes[sid].pid, signal.SIGKILL)
    await until(lambda: len(backend.exits) == 1, 10, "the init's exit", 0.02)
    assert backend.exits[0][:2] == (sid, ExitReason.exited)
    assert sid not in backend.list_running()
    assert not os.path.exists(f"{backend.sandboxes_dir}/{sid}")

    sid2 = await started(backend, base_layer, timeout_s=1)
    await until(lambda: len(backend.exits) == 2, 10, "the timeout's exit", 0.02)
    assert backend.exits[1][:2] == (sid2, ExitReason.timeout)
    assert await backend.stop(sid2) == backend.exits[1][2]


async def test_cleanup_orphans(backend, base_layer):
    sid = await started(backend, base_layer)
    # A fresh backend on the same state dir plays the restarted agent.
    again = ContainerBackend(backend.settings)
    await again.cleanup_orphans()
    assert os.listdir(again.sandboxes_dir) == []
    assert not any(m.startswith(again.sandboxes_dir) for m in mounts.mountpoints())
    # The first backend may already have seen its container die (pidfd) and cleaned up.
    backend._sandboxes.pop(sid, None)


async def test_abandoned_stream_kills_command(backend, base_layer):
    sid = await started(backend, base_layer)
    stream = backend.exec_stream(sid, run("echo started; sleep 30", timeout_s=60))
    first = await anext(stream)
    assert (first.type, first.data) == ("stdout", "started\n")
    await stream.aclose()  # what a disconnected HTTP client amounts to

    async def sleep_gone() -> bool:
        r = await backend.exec(sid, run("ps -o args | grep -c '^sleep 30' || true"))
        return r.stdout.strip() == "0"

    await until(sleep_gone, timeout_s=10, what="the abandoned command to be killed")


async def test_long_id_and_concurrent_execs(backend, base_layer):
    sid = "x" * 100
    await backend.start(sid, SandboxSpec(environment="busybox", memory_mb=128, disk_mb=32), RootFs([base_layer]))
    results = await asyncio.gather(*(backend.exec(sid, run(f"echo {i}")) for i in range(20)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(20)]
    assert (await backend.exec(sid, run("hostname"))).stdout == "x" * 63 + "\n"


async def test_exec_rejects_bad_env(backend, base_layer):
    sid = await started(backend, base_layer)
    # ExecRequest refuses both itself (a 422 at the api and the node's HTTP); the backend still
    # checks what it is handed, unvalidated.
    unchecked = run("true").model_dump()
    with pytest.raises(BadInput):
        await backend.exec(sid, ExecRequest.model_construct(**{**unchecked, "env": {"A=B": "x"}}))
    with pytest.raises(BadInput):
        await backend.exec(sid, ExecRequest.model_construct(**{**unchecked, "cmd": ["echo", "a\0b"]}))


async def test_pause_freezes_resume_thaws_and_stop_while_paused_is_clean(backend, base_layer):
    sid = await started(backend, base_layer)
    await backend.exec(sid, run("(while true; do date +%s%N >> /tmp/ticks; sleep 0.05; done) &"))
    freezer = V1Driver().cgroup(f"/corral/{backend.settings.node_id}/{sid}").dirs["freezer"]
    await backend.pause(sid)
    await backend.pause(sid)  # idempotent
    assert Path(f"{freezer}/freezer.state").read_text().strip() == "FROZEN"
    ticks = Path(f"{root_of(backend, sid)}/tmp/ticks")
    frozen_at = ticks.read_text().count("\n")
    with pytest.raises(Conflict):
        await backend.exec(sid, run("true"))
    await asyncio.sleep(0.3)
    assert ticks.read_text().count("\n") == frozen_at  # nothing ran while frozen
    await backend.resume(sid)
    await backend.resume(sid)  # idempotent
    assert Path(f"{freezer}/freezer.state").read_text().strip() == "THAWED"
    assert (await backend.exec(sid, run("echo ok"))).stdout == "ok\n"
    await backend.pause(sid)
    await backend.stop(sid)  # a frozen sandbox is thawed, then killed and removed
    assert not os.path.exists(f"{backend.sandboxes_dir}/{sid}") and not os.path.exists(freezer)
