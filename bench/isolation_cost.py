#!/usr/bin/env python3
"""What issue 18's isolation costs a container's create and exec, knob by knob, interleaved in
one run against the same raw crun (docs/benchmarks.md has the numbers):

    python bench/isolation_cost.py --rounds 60

ContainerBackends on real crun, one busybox layer, each arm adding one knob to the one before:
`none` (the container as before issue 18: tmpfs upper, no syscall filter, host uid 1000),
`+seccomp` (the container-default profile, precompiled), `+disk` (the sandbox's own ext4 disk
from the pool), `+userns` (its own user namespace: the default, everything on). Each round
starts one sandbox of each arm in a rotating order, runs `true` in it, stops it, with `--gap`
seconds between sandboxes (the pool refills then). The raw floor: `crun run --detach` of a
bare busybox bundle on a tmpfs-backed overlay, same rounds. Needs root; runs in a private
mount namespace.
"""

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from upper_disk import TmpfsUpper, busybox_layer, p50  # noqa: E402  (also puts the services on sys.path)

from corral_host import mounts, namespaces  # noqa: E402

ARMS = ("none", "+seccomp", "+disk", "+userns")
RAW_CGROUP = "/corral-bench-iso"


def raw_bundle(work: str, layer: str, name: str) -> str:
    """A bare OCI bundle over the layer (crun's own defaults: no filter, no user namespace)."""
    bundle = f"{work}/raw/{name}"
    for sub in ("upper", "rootfs"):
        os.makedirs(f"{bundle}/{sub}")
    mounts.mount_tmpfs(f"{bundle}/upper", 64, 0o755)
    os.makedirs(f"{bundle}/upper/u")
    os.makedirs(f"{bundle}/upper/w")
    mounts.mount_overlay([layer], f"{bundle}/upper/u", f"{bundle}/upper/w", f"{bundle}/rootfs")
    config = {
        "ociVersion": "1.0.0",
        "process": {"args": ["/bin/sleep", "3600"], "cwd": "/", "user": {"uid": 1000, "gid": 1000},
                    "env": ["PATH=/bin:/usr/bin"], "noNewPrivileges": True},
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
                  "cgroupsPath": f"{RAW_CGROUP}/{name}",
                  "resources": {"memory": {"limit": 64 << 20}, "pids": {"limit": 512}}},
    }
    with open(f"{bundle}/config.json", "w") as fh:
        json.dump(config, fh)
    return bundle


async def crun(*args: str) -> None:
    # (`crun run --detach` hands its stdio to the container: a file, never a pipe we would wait on.)
    with tempfile.TemporaryFile() as err:
        proc = await asyncio.create_subprocess_exec("crun", "--root", CRUN_ROOT, *args,
                                                    stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.DEVNULL, stderr=err)
        if await proc.wait() != 0:
            err.seek(0)
            raise RuntimeError(f"crun {args[0]}: {err.read().decode().strip()}")


CRUN_ROOT = ""


async def run(work: str, layer: str, rounds: int, gap: float) -> dict:
    from corral_common.contracts.exec import ExecRequest
    from corral_common.contracts.sandboxes import SandboxSpec
    from corral_node_agent.backends.container import ContainerBackend
    from corral_node_agent.backends.container import backend as backend_module
    from corral_node_agent.backends.types import RootFs
    from corral_node_agent.isolation.seccomp import NO_FILTER
    from corral_node_agent.settings import NodeAgentSettings

    real_policy_for = backend_module.policy_for
    current = {"arm": "+userns"}

    def policy_for(spec, settings, ids=None):
        policy = real_policy_for(spec, settings, ids)
        if current["arm"] == "none":
            policy = type(policy)(**{**policy.__dict__, "syscalls": NO_FILTER})
        return policy

    backend_module.policy_for = policy_for
    backends = {}
    for arm in ARMS:
        settings = NodeAgentSettings(node_id=f"bench-iso-{ARMS.index(arm)}-{uuid.uuid4().hex[:4]}",
                                     state_dir=f"{work}/{ARMS.index(arm)}",
                                     container_uid_base=0 if arm == "+userns" else -1)
        backends[arm] = ContainerBackend(settings)
        if arm in ("none", "+seccomp"):
            backends[arm].disks = TmpfsUpper()
    rootfs = RootFs([layer])
    spec = SandboxSpec(environment="busybox", memory_mb=64, disk_mb=256)
    create: dict[str, list[float]] = {k: [] for k in (*ARMS, "raw")}
    execs: dict[str, list[float]] = {k: [] for k in (*ARMS, "raw")}

    async def one(arm: str) -> None:
        current["arm"] = arm
        sid = "i-" + uuid.uuid4().hex[:8]
        if arm == "raw":
            bundle = raw_bundle(work, layer, sid)
            t0 = time.perf_counter()
            await crun("run", "--detach", "--bundle", bundle, sid)
            t1 = time.perf_counter()
            await crun("exec", sid, "/bin/true")
            t2 = time.perf_counter()
            await crun("delete", "--force", sid)
            mounts.umount_tree(bundle)
            shutil.rmtree(bundle, ignore_errors=True)
        else:
            backend = backends[arm]
            t0 = time.perf_counter()
            await backend.start(sid, spec, rootfs)
            t1 = time.perf_counter()
            result = await backend.exec(sid, ExecRequest(cmd=["true"], timeout_s=10))
            t2 = time.perf_counter()
            assert result.exit_code == 0, result
            await backend.stop(sid)
        create[arm].append((t1 - t0) * 1000)
        execs[arm].append((t2 - t1) * 1000)

    for arm in (*ARMS, "raw"):  # warm: crun, templates, the seccomp program, the userns helper
        await one(arm)
        create[arm].clear()
        execs[arm].clear()
    order = [*ARMS, "raw"]
    for i in range(rounds):
        for arm in order[i % len(order):] + order[:i % len(order)]:
            await one(arm)
            await asyncio.sleep(gap)
    for backend in backends.values():
        await backend.close()
    from corral_host.cgroups.detect import cgroup_driver

    cgroup_driver().cgroup(RAW_CGROUP).remove()
    return {arm: {"create_p50_ms": round(p50(create[arm]), 2), "exec_p50_ms": round(p50(execs[arm]), 2)}
            for arm in create}


def main() -> None:
    global CRUN_ROOT
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--gap", type=float, default=0.3)
    parser.add_argument("--json", default=None, help="write the numbers here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (crun, mounts)")
    namespaces.enter_private_mount_namespace()
    work = tempfile.mkdtemp(prefix="corral-bench-iso-")
    CRUN_ROOT = f"{work}/crun-raw"
    try:
        res = asyncio.run(run(work, busybox_layer(work), args.rounds, args.gap))
    finally:
        mounts.umount_tree(work)
        shutil.rmtree(work, ignore_errors=True)
    none, raw = res["none"]["create_p50_ms"], res["raw"]["create_p50_ms"]
    print(f"{args.rounds} rounds, gap {args.gap}s")
    print(f"{'arm':9s} {'create p50':>11s} {'vs none':>8s} {'vs raw':>7s} {'exec p50':>9s}")
    for arm, r in res.items():
        print(f"{arm:9s} {r['create_p50_ms']:9.1f}ms {r['create_p50_ms'] / none:8.3f} "
              f"{r['create_p50_ms'] / raw:7.2f} {r['exec_p50_ms']:7.1f}ms")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
