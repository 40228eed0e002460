"""The cgroup v2 driver on a real unified hierarchy: this host is v1 (hybrid), so it runs in a
microVM whose guest kernel (the guest kit's Debian 6.1 cloud kernel) mounts cgroup2 with every
controller. One boot: a busybox base with a layer holding this test's own Python interpreter
(the binary, its shared libraries and the standard library), the real cgroups package copied in
through the files API, and cgroup_v2_guest.py driving it; this test asserts on what it saw.

Needs root, qemu-system-x86_64, mkfs.erofs and ldd (slow under TCG: ~1-2 min).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec
from corral_host.cgroups import node as node_cgroup
from corral_host.cgroups.detect import cgroup_driver
from corral_node_agent.backends.types import RootFs
from corral_node_agent.settings import NodeAgentSettings

pytestmark = [pytest.mark.xdist_group("vm")]

if shutil.which("qemu-system-x86_64") is None:
    pytest.skip("VM tests need qemu-system-x86_64 (apt install qemu-system-x86)", allow_module_level=True)

MIB = 1 << 20
PACKAGE = Path(__file__).resolve().parents[4] / "libs/host/corral_host"
GUEST_FILES = ["mounts.py", *(f"cgroups/{m}.py" for m in ("__init__", "base", "detect", "files", "mounts", "v1", "v2"))]
LIBDIR = "/usr/lib/x86_64-linux-gnu"
STDLIB_SKIP = shutil.ignore_patterns("test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
                                     "site-packages", "dist-packages", "config-*", "pydoc_data", "distutils")


def _shared_libraries(*objects: str) -> set[str]:
    libs = set()
    for obj in objects:
        out = subprocess.run(["ldd", obj], capture_output=True, text=True).stdout
        libs |= set(re.findall(r"(?:=> )?(/\S+) \(0x", out))
    return libs


@pytest.fixture(scope="module")
def python_layer(work_dir) -> str:
    if not shutil.which("ldd"):
        pytest.skip("needs ldd to collect the interpreter's shared libraries")
    return build_python_layer(work_dir)


def build_python_layer(work_dir: str) -> str:
    """An EROFS layer with the running interpreter as /usr/bin/python3 (its stdlib, extension
    modules and every shared library they load, the dynamic loader at its usual path)."""
    root = Path(work_dir) / "vm-python"
    shutil.rmtree(root, ignore_errors=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    binary = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    stdlib = sysconfig.get_paths()["stdlib"]
    shutil.copytree(stdlib, root / f"usr/lib/{version}", ignore=STDLIB_SKIP, symlinks=True)
    (root / "usr/bin").mkdir(parents=True)
    shutil.copy2(binary, root / f"usr/bin/{version}")
    (root / "usr/bin/python3").symlink_to(version)
    dynload = sorted(str(p) for p in (root / f"usr/lib/{version}/lib-dynload").glob("*.so"))
    (root / LIBDIR.lstrip("/")).mkdir(parents=True)
    (root / "lib64").mkdir()
    for lib in _shared_libraries(binary, *dynload):
        target = root / ("lib64" if "/ld-linux" in lib else LIBDIR.lstrip("/")) / os.path.basename(lib)
        shutil.copy2(os.path.realpath(lib), target)
    image = f"{work_dir}/vm-python.erofs"
    subprocess.run(["mkfs.erofs", image, str(root)], check=True, capture_output=True)
    return image


async def test_the_v2_driver_on_a_guest_kernels_unified_hierarchy(work_dir, guestkit_dir, layers, python_layer):
    from corral_node_agent.backends.vm.backend import MicroVmBackend

    backend = MicroVmBackend(NodeAgentSettings(node_id=f"cg2test-{uuid.uuid4().hex[:6]}", guestkit_dir=guestkit_dir,
                                               state_dir=f"{work_dir}/vm-state-{uuid.uuid4().hex[:6]}"))
    sid = "vm-" + uuid.uuid4().hex[:8]
    await backend.start(sid, SandboxSpec(environment="busybox", backend="microvm", memory_mb=256),
                        RootFs([python_layer, layers["blk"]]))
    try:
        res = await backend.exec(sid, ExecRequest(cmd="mkdir -p /opt/corral/corral_host/cgroups", user="root"))
        assert res.exit_code == 0, res.stderr
        await backend.write_file(sid, "/opt/corral/corral_host/__init__.py", b"")
        for name in GUEST_FILES:
            await backend.write_file(sid, f"/opt/corral/corral_host/{name}", (PACKAGE / name).read_bytes())
        await backend.write_file(sid, "/opt/corral/cgroup_v2_guest.py",
                                 (Path(__file__).parent / "cgroup_v2_guest.py").read_bytes())
        res = await backend.exec(sid, ExecRequest(
            cmd="mkdir -p /sys/fs/cgroup && { grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup; } && exec python3 /opt/corral/cgroup_v2_guest.py",
            env={"LD_LIBRARY_PATH": LIBDIR, "PYTHONHOME": "/usr", "PYTHONPATH": "/opt/corral", "PYTHONDONTWRITEBYTECODE": "1"},
            user="root", timeout_s=900))
        assert res.exit_code == 0, res.stdout + res.stderr
        seen = json.loads(res.stdout)
    finally:
        await backend.stop(sid)
        await backend.close()
        node_cgroup.release(cgroup_driver(), backend.settings.node_id)  # (its node id is this test's own)
    print(json.dumps(seen, indent=1))

    # detection and layout: v2, the node's tree at the root, controllers handed down
    assert seen["kernel"].startswith("6.1.")
    assert (seen["driver"], seen["available"], seen["base"]) == ("v2", True, "/")
    assert {"cpu", "memory", "pids"} <= set(seen["root_subtree_control"])
    assert {"cpu", "memory", "pids"} <= set(seen["sb_controllers"])
    assert seen["runtime_path"] == "/corral/n1/sb"

    # limits land
    assert seen["limits"] == {"memory.max": str(32 * MIB), "memory.swap.max": "0", "pids.max": "8",
                              "cpu.max": "25000 100000"}
    assert seen["swap_limit"] is True
    assert seen["node_limits"] == {"memory.max": str(192 * MIB), "pids.max": "64"}
    assert seen["cpu_lifted"] == "max 100000"

    # over its pids limit a fork fails, the driver says so, kill empties the cgroup
    pids = seen["pids"]
    assert pids["shell_exit"] != 0 and "fork" in pids["stderr"], pids
    assert pids["current"] <= 8 and pids["limited"] is True and pids["left"] >= 1
    assert (pids["killed"], pids["after_kill"], pids["populated_after_kill"]) == (True, [], False)

    # OOM: killed, reported through memory.events, counted per run
    oom = seen["oom"]
    assert oom["exit"] == -9 and oom["oom_kills"] == 1 and oom["oom_killed"] is True, oom
    assert oom["events"]["oom_kill"] >= 1
    assert 24 * MIB <= oom["peak"] <= 33 * MIB  # memory.peak: at the cap
    assert oom["after_reset"] == 0

    # cpu.max throttles, usage_usec counts, and counts from the reset
    cpu = seen["cpu"]
    assert cpu["throttled"] and cpu["stat"]["nr_throttled"] >= 3 and cpu["cpu_ms"] > 0, cpu
    assert cpu["killed"] and cpu["after_reset_ns"] == 0

    assert seen["freeze"]["frozen"] and seen["freeze"]["events"]["frozen"] == 1
    assert seen["freeze"]["after_thaw"]["frozen"] == 0

    # a memory cap below usage: EBUSY (16), the old cap stays, nothing was killed for it
    assert seen["cap_below_usage"] == {"held": "held", "errno": 16, "memory.max": str(96 * MIB), "alive": True}

    # removal: the tree's processes killed (cgroup.kill), its directories gone
    assert seen["remove"] == {"node_exists": False, "sleeper": -9, "holder": -9, "corral_exists": False}

    # delegated: the tree below the unit's cgroup, the agent moved out of it to a leaf
    d = seen["delegated"]
    unit = "/corral-node-agent.service"
    assert d["base"] == unit and d["runtime_path"] == f"{unit}/corral/n2/sb"
    assert d["dir"] == f"/sys/fs/cgroup{unit}/corral/n2/sb"
    assert d["own"] == f"0::{unit}/corral-agent" and d["unit_procs"] == []
    assert {"memory", "pids"} <= set(d["unit_subtree_control"]) and d["pids.max"] == "4"
    assert d["killed"] and d["removed"]
