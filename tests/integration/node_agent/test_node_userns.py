"""Per-sandbox user namespaces against real crun: every sandbox is its own range of host ids,
so per-uid kernel state (keyrings, inotify instances, RLIMIT_NPROC) is per sandbox, root
inside is nobody on the host, image files still belong to root inside, and the sandbox's
mountinfo names no host path. Each test would fail with all sandboxes sharing host uid 1000."""

import errno
import json
import os
import shutil
import subprocess
import uuid

import pytest
import pytest_asyncio

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec
from corral_host import loopdev
from corral_host.mounts import mount_erofs, mountpoints, umount
from corral_host.userns import RANGE_SIZE, IdRange
from corral_node_agent.backends.container import ContainerBackend
from corral_node_agent.backends.types import RootFs
from corral_node_agent.settings import NodeAgentSettings
from tests.integration.node_agent.sandbox_paths import disk_of, root_of
from tests.polling import until

pytestmark = pytest.mark.asyncio

PROBE = "/usr/local/bin/probe"


@pytest.fixture(scope="session")
def probe_layer(work_dir):
    """A layer holding userns_probe.c, built static (busybox has no keyctl or inotify tools)."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the probe")
    root = f"{work_dir}/probe-root"
    os.makedirs(f"{root}/usr/local/bin")
    src = os.path.join(os.path.dirname(__file__), "userns_probe.c")
    subprocess.run(["gcc", "-static", "-O2", "-o", f"{root}{PROBE}", src], check=True, capture_output=True)
    image, mnt = f"{work_dir}/probe.erofs", f"{work_dir}/probe-mnt"
    subprocess.run(["mkfs.erofs", image, root], check=True, capture_output=True)
    os.mkdir(mnt)
    mount_erofs(image, mnt)
    yield mnt
    umount(mnt)


@pytest_asyncio.fixture
async def backend(state_dir, node_id, base_layer):
    b = ContainerBackend(NodeAgentSettings(node_id=node_id, state_dir=state_dir))
    yield b
    await b.close()


@pytest.fixture
def layers(probe_layer, base_layer) -> RootFs:
    return RootFs([probe_layer, base_layer])


async def started(backend, layers, **spec) -> str:
    sid = "u-" + uuid.uuid4().hex[:10]
    spec = {"memory_mb": 128, "disk_mb": 64, "pids_limit": 64, **spec}
    await backend.start(sid, SandboxSpec(environment="busybox", **spec), layers)
    return sid


async def sh(backend, sid, cmd, **kw) -> str:
    r = await backend.exec(sid, ExecRequest(cmd=cmd, timeout_s=20, **kw))
    assert r.exit_code == 0, (cmd, r)
    return r.stdout


def ids_of(backend, sid) -> IdRange:
    ids = backend._sandboxes[sid].policy.identity.ids
    assert ids is not None
    return ids


def host_uids(backend, sid) -> set[int]:
    """Real uids, as the host sees them, of every process in the sandbox's pid namespace."""
    ns = os.stat(f"/proc/{backend._sandboxes[sid].pid}/ns/pid").st_ino
    uids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}/ns/pid").st_ino != ns:
                continue
            with open(f"/proc/{pid}/status") as fh:
                uids.add(int(next(line for line in fh if line.startswith("Uid:")).split()[1]))
        except (OSError, StopIteration):
            continue  # gone meanwhile
    return uids


async def test_each_sandbox_is_its_own_range_of_host_ids(backend, layers):
    a, b = await started(backend, layers), await started(backend, layers)
    ra, rb = ids_of(backend, a), ids_of(backend, b)
    assert ra.host_base != rb.host_base and ra.size == rb.size == RANGE_SIZE
    assert abs(ra.host_base - rb.host_base) >= RANGE_SIZE  # disjoint
    for sid, ids in ((a, ra), (b, rb)):
        assert await sh(backend, sid, "id -u; id -g; cat /proc/self/uid_map /proc/self/gid_map") == (
            f"1000\n1000\n{0:>10} {ids.host_base:>10} {RANGE_SIZE:>10}\n" * 1
            + f"{0:>10} {ids.host_base:>10} {RANGE_SIZE:>10}\n")
        assert await sh(backend, sid, "id -u", user="root") == "0\n"
        await sh(backend, sid, "sleep 300 >/dev/null 2>&1 &", user="root")
        # The init and the sandbox user: base + 1000; root inside: base. Never 0 or 1000.
        assert host_uids(backend, sid) == {ids.host(1000), ids.host_base}
        with open(f"{backend.sandboxes_dir}/{sid}/sandbox.json") as fh:
            assert json.load(fh)["userns"] == {"host_base": ids.host_base, "size": RANGE_SIZE}
        assert os.path.exists(f"{backend.settings.uid_registry_dir}/{ids.host_base}")
    # Only the sandbox's own dir opens to its root (crun resolves rootfs/ from there): the
    # node's dirs above it (and the test's 0700 work dir) stay closed to other host users.
    assert os.stat(backend.sandboxes_dir).st_mode & 0o777 == 0o700
    st = os.stat(f"{backend.sandboxes_dir}/{a}")
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o710, 0, ra.host_base)
    await backend.stop(a)
    assert not os.path.exists(f"{backend.settings.uid_registry_dir}/{ra.host_base}")  # released


async def test_image_files_belong_to_root_inside_and_uploads_to_the_sandbox_user(backend, layers):
    sid = await started(backend, layers)
    ids = ids_of(backend, sid)
    assert await sh(backend, sid, f"stat -c '%u:%g' /bin/busybox {PROBE} /home/user /") == "0:0\n0:0\n1000:1000\n0:0\n"
    rootfs = root_of(backend, sid)
    assert os.stat(f"{rootfs}/bin/busybox").st_uid == ids.host_base  # idmapped layer, host view
    # Root inside may change the image (copy-up into the upper, as the range's root)...
    await sh(backend, sid, "echo changed >> /etc/passwd && stat -c %u /etc/passwd", user="root")
    assert os.stat(f"{disk_of(backend, sid)}/upper/etc/passwd").st_uid == ids.host_base
    # ... the sandbox user may not, but owns HOME and what the files API puts there.
    r = await backend.exec(sid, ExecRequest(cmd="echo x >> /etc/passwd", timeout_s=10))
    assert r.exit_code != 0 and "Permission denied" in r.stderr
    await backend.write_file(sid, "up/loaded.txt", b"uploaded\n")
    await sh(backend, sid, "echo appended >> up/loaded.txt; touch up/new")
    assert await sh(backend, sid, "stat -c '%u:%g' up up/loaded.txt up/new; cat up/loaded.txt") == (
        "1000:1000\n1000:1000\n1000:1000\nuploaded\nappended\n")
    assert os.stat(f"{rootfs}/home/user/up/loaded.txt").st_uid == ids.host(1000)
    # ... on the sandbox's own disk, in the upper the range's root owns (the disk's root stays host root's).
    upper = disk_of(backend, sid)
    assert (os.stat(upper).st_uid, os.stat(f"{upper}/upper").st_uid, os.stat(f"{upper}/work").st_uid) == (
        0, ids.host_base, ids.host_base)
    assert os.stat(f"{upper}/upper/home/user/up/loaded.txt").st_uid == ids.host(1000)
    # Downloads read what the sandbox wrote, whoever owns it inside.
    await sh(backend, sid, "echo by-root > /root-made && chmod 600 /root-made", user="root")
    assert await backend.read_file(sid, "/root-made") == b"by-root\n"
    assert await backend.read_file(sid, "up/loaded.txt") == b"uploaded\nappended\n"
    assert os.stat(f"{rootfs}/root-made").st_uid == ids.host_base


async def test_a_disk_kept_ready_by_the_pool_is_handed_to_the_sandboxs_root(backend, layers):
    # The pool makes disks before it knows whose they will be: the range is applied when one is taken.
    first = await started(backend, layers, disk_mb=48)
    pool = backend.disks.pool
    assert pool is not None

    def ready() -> set[int]:
        """The inodes of the ready 48 MiB disks' images (a taken one keeps its inode)."""
        with pool._lock:
            return {os.stat(d.image).st_ino for d in pool._ready.get(48, [])}

    # Full: no disk is added between now and the take (it takes the newest).
    kept = await until(lambda: len(ready()) == pool.per_size and ready(), 30, "the pool to keep 48 MiB disks ready")
    sid = await started(backend, layers, disk_mb=48)
    assert os.stat(f"{backend.sandboxes_dir}/{sid}/upper.img").st_ino in kept  # a ready disk, not a new one
    ids = ids_of(backend, sid)
    assert ids != ids_of(backend, first)
    upper = disk_of(backend, sid)
    assert (os.stat(f"{upper}/upper").st_uid, os.stat(f"{upper}/work").st_gid) == (ids.host_base, ids.host_base)
    assert await sh(backend, sid, "echo x > /etc/new && stat -c %u:%g /etc/new", user="root") == "0:0\n"
    await backend.write_file(sid, "f.txt", b"f")
    assert await sh(backend, sid, "stat -c %u:%g f.txt") == "1000:1000\n"


async def test_root_inside_cannot_touch_what_host_root_owns(backend, layers, state_dir):
    sid = await started(backend, layers)
    planted = f"{root_of(backend, sid)}/etc/host-owned"
    with open(planted, "w") as fh:  # written host-side by host root: owner 0, unmapped inside
        fh.write("host\n")
    os.chmod(planted, 0o644)
    out = await sh(backend, sid, "stat -c %u /etc/host-owned; cat /etc/host-owned; "
                                 "echo x >> /etc/host-owned && echo WROTE; chown 0 /etc/host-owned && echo CHOWNED; "
                                 "echo x > /proc/sys/kernel/domainname && echo SYSCTL; "
                                 f"test -e {state_dir} && echo HOSTDIR; true", user="root")
    assert out.split("\n")[:2] == ["65534", "host"]  # nobody: host root is not mapped
    assert not {"WROTE", "CHOWNED", "SYSCTL", "HOSTDIR"} & set(out.split("\n")), out
    with open(planted) as fh:
        assert fh.read() == "host\n"


async def test_mountinfo_names_no_host_path(backend, layers, state_dir, node_id, work_dir):
    sid = await started(backend, layers)
    mountinfo = await sh(backend, sid, "cat /proc/self/mountinfo")
    for secret in (state_dir, work_dir, node_id, sid, backend.sandboxes_dir):
        assert secret not in mountinfo, (secret, mountinfo)
    root = next(line for line in mountinfo.splitlines() if line.split()[4] == "/")
    assert "lowerdir+=/,lowerdir+=/,upperdir=/upper,workdir=/work" in root, root
    assert {line.rsplit(":", 1)[1] for line in (await sh(backend, sid, "cat /proc/self/cgroup")).splitlines()} == {"/"}


def in_userns(backend, sid, *argv: str, uid: int = 1000) -> str:
    """Run a program of the sandbox as ``uid`` of its user namespace (so as the host uid the
    sandbox's own uid maps to), entered from the host: without the sandbox's syscall filter."""
    pid = backend._sandboxes[sid].pid
    return subprocess.run(["nsenter", "-t", str(pid), "-U", "-m", f"-S{uid}", f"-G{uid}", *argv],
                          check=True, capture_output=True, text=True, timeout=10).stdout


async def test_keyrings_and_key_quotas_are_per_sandbox(backend, layers):
    a, b = await started(backend, layers), await started(backend, layers)
    # From inside, the syscall filter refuses keyrings outright (isolation/seccomp.py)...
    for sid in (a, b):
        assert (await sh(backend, sid, f"{PROBE} addkey k")).startswith("refused"), sid
    # ... and below the filter, uid 1000 of each sandbox is a host uid of its own: its own
    # user keyring and its own key quota (kernel.keys.maxkeys per uid). With one host uid
    # for every sandbox, b would find a's key and hit the quota a filled.
    name = f"k-{a}"
    assert in_userns(backend, a, PROBE, "addkey", name) == "added\n"
    assert in_userns(backend, a, PROBE, "findkey", name) == "found\n"
    assert in_userns(backend, b, PROBE, "findkey", name) == "missing\n"
    added, count, why = in_userns(backend, a, PROBE, "fillkeys", name).split()
    assert (added, why) == ("added", "EDQUOT") and 0 < int(count) < 200, count
    assert in_userns(backend, a, PROBE, "addkey", f"{name}-more") == f"refused {errno.EDQUOT}\n"
    assert in_userns(backend, b, PROBE, "addkey", name) == "added\n"


async def test_inotify_instances_are_per_sandbox(backend, layers):
    with open("/proc/sys/fs/inotify/max_user_instances") as fh:
        limit = int(fh.read())
    a, b = await started(backend, layers), await started(backend, layers)
    await sh(backend, a, f"{PROBE} hold-inotify {limit + 1} > /tmp/held &")

    async def held() -> str:
        return (await sh(backend, a, "cat /tmp/held")).strip()

    await until(held, 10, "the holder to open its instances", 0.05)
    assert await held() == f"opened {limit} EMFILE"  # the per-uid limit, reached in a
    assert (await sh(backend, a, f"{PROBE} inotify 1")).strip() == "opened 0 EMFILE"
    assert (await sh(backend, b, f"{PROBE} inotify 1")).strip() == "opened 1 ok"  # b is another uid


async def test_rlimit_nproc_counts_only_the_sandboxs_own_processes(backend, layers):
    a, b = await started(backend, layers, pids_limit=128), await started(backend, layers)
    await sh(backend, a, "for i in $(seq 40); do sleep 300 >/dev/null 2>&1 & done")
    out = await sh(backend, b, "ulimit -u 20; for i in $(seq 10); do sleep 300 >/dev/null 2>&1 & done; echo ok")
    assert out == "ok\n"  # a's 40 processes are not b's uid
    r = await backend.exec(b, ExecRequest(cmd="ulimit -u 12; for i in $(seq 5); do sleep 300 & done", timeout_s=10))
    assert "can't fork" in r.stderr  # the limit is real: b's own 10 + the shell count


async def test_a_restarted_agent_readopts_with_the_same_ids(backend, layers):
    sid = await started(backend, layers)
    ids = ids_of(backend, sid)
    await backend.write_file(sid, "before.txt", b"1")
    # The first agent "dies": it forgets the sandbox without stopping it.
    old = backend._sandboxes.pop(sid)
    backend._unwatch(old)
    again = ContainerBackend(backend.settings)
    try:
        assert await again.cleanup_orphans(adopt=True) == [sid]
        assert ids_of(again, sid) == ids
        await again.write_file(sid, "after.txt", b"2")
        assert await sh(again, sid, "stat -c '%u:%g' before.txt after.txt; id -u") == "1000:1000\n1000:1000\n1000\n"
        other = await started(again, layers)
        assert ids_of(again, other) != ids  # still held by the adopted sandbox
        await again.stop(sid)
        assert not os.path.exists(f"{again.settings.uid_registry_dir}/{ids.host_base}")
    finally:
        await again.close()


async def test_start_and_stop_leave_no_mount_and_no_claim(backend, layers):
    def mounts() -> list[str]:
        return [m for m in mountpoints() if m.startswith(backend.sandboxes_dir + "/")]

    sids = [await started(backend, layers) for _ in range(3)]
    ranges = [ids_of(backend, sid) for sid in sids]
    images = [f"{backend.sandboxes_dir}/{sid}/upper.img" for sid in sids]
    # Mounted only in the containers' namespaces (bundle.detach), each disk on its loop device.
    assert mounts() == [] and all(loopdev.devices_backed_by(image) for image in images)
    for sid in sids:
        await backend.stop(sid)
    assert mounts() == []
    await until(lambda: not any(loopdev.devices_backed_by(image) for image in images), 10, "the loop devices to clear")
    claims = os.listdir(backend.settings.uid_registry_dir)
    assert not {str(r.host_base) for r in ranges} & set(claims)


async def test_the_hosts_dev_null_is_never_handed_to_a_sandbox(backend, layers):
    # crun chowns a container's std streams to its user: were they the host's /dev/null, a
    # sandbox uid would own it (and could chmod it for the whole host).
    sid = await started(backend, layers)
    await sh(backend, sid, "true")
    ids = ids_of(backend, sid)
    st = os.stat("/dev/null")
    assert not ids.host_base <= st.st_uid < ids.host_base + ids.size, st
    assert not ids.host_base <= st.st_gid < ids.host_base + ids.size, st
    # The sandbox's /dev/null is a node of its own disk (bundle.populate_disk), its root's.
    owner, node, dev_of_null, dev_of_shm = (await sh(backend, sid, "stat -c '%u:%g %t:%T %D' /dev/null; "
                                                                   "stat -c %D /dev/shm")).split()
    assert (owner, node, dev_of_null) == ("0:0", "1:3", dev_of_shm) and int(dev_of_null, 16) != st.st_dev
