#!/usr/bin/env python3
"""What a sandbox's own disk costs a container's create and delete, against the tmpfs upper it
replaced, interleaved in one run (docs/disk.md has the numbers):

    python bench/upper_disk.py --rounds 40 --disk-mb 1024 --gap 0.3

Three ContainerBackends on real crun, one busybox layer: `tmpfs` (the upper a tmpfs of
disk_mb, as before), `pool` (the default: a ready disk moved into place), `made` (disk_pool=0:
each create makes its disk). Each round starts and stops one sandbox of each, in a rotating
order, with `--gap` seconds between sandboxes (a sandbox's life: the pool refills then).
Needs root; runs in a private mount namespace.
"""

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for sub in ("libs/common", "services/node-agent", "services/image-service"):
    sys.path.insert(0, str(ROOT / sub))

from corral_host import mounts, namespaces  # noqa: E402

KINDS = ("tmpfs", "pool", "made")


class TmpfsUpper:
    """The upper as it was: a tmpfs of disk_mb mounted by the agent."""

    def mount(self, image, target, quota):
        mounts.mount_tmpfs(target, quota.size_mb, 0o755)

        class Nothing:
            def to_json(self):
                return {}

        return Nothing()

    def discard(self, target, image):
        pass

    def close(self):
        pass


def p50(values: list[float]) -> float:
    return statistics.median(values)


def busybox_layer(work: str) -> str:
    from corral_image_service.builders.busybox import build_busybox

    build_busybox(f"{work}/root")
    subprocess.run(["mkfs.erofs", "-zlz4hc", f"{work}/base.erofs", f"{work}/root"], check=True, capture_output=True)
    os.mkdir(f"{work}/base")
    mounts.mount_erofs(f"{work}/base.erofs", f"{work}/base")
    return f"{work}/base"


async def run(work: str, layer: str, rounds: int, disk_mb: int, gap: float) -> None:
    from corral_common.contracts.sandboxes import SandboxSpec
    from corral_node_agent.backends.container import ContainerBackend
    from corral_node_agent.backends.types import RootFs
    from corral_node_agent.settings import NodeAgentSettings

    rootfs = RootFs([layer])
    backends = {}
    for kind in KINDS:
        settings = NodeAgentSettings(node_id=f"bench-disk-{kind}-{uuid.uuid4().hex[:4]}",
                                     state_dir=f"{work}/{kind}", disk_pool=0 if kind == "made" else 2)
        backends[kind] = ContainerBackend(settings)
    backends["tmpfs"].disks = TmpfsUpper()
    upper_ms: dict[str, list[float]] = {k: [] for k in KINDS}
    for kind, backend in backends.items():
        mount = backend.disks.mount

        def timed(*args, _mount=mount, _kind=kind):
            t0 = time.perf_counter()
            try:
                return _mount(*args)
            finally:
                upper_ms[_kind].append((time.perf_counter() - t0) * 1000)

        backend.disks.mount = timed
    spec = SandboxSpec(environment="busybox", memory_mb=64, disk_mb=disk_mb)
    create: dict[str, list[float]] = {k: [] for k in KINDS}
    delete: dict[str, list[float]] = {k: [] for k in KINDS}
    for kind, backend in backends.items():  # warm: crun, the template of this size
        sid = "warm-" + uuid.uuid4().hex[:6]
        await backend.start(sid, spec, rootfs)
        await backend.stop(sid)
        upper_ms[kind].clear()
    for i in range(rounds):
        for kind in KINDS[i % 3:] + KINDS[:i % 3]:
            backend, sid = backends[kind], "b-" + uuid.uuid4().hex[:8]
            t0 = time.perf_counter()
            await backend.start(sid, spec, rootfs)
            t1 = time.perf_counter()
            await backend.stop(sid)
            delete[kind].append((time.perf_counter() - t1) * 1000)
            create[kind].append((t1 - t0) * 1000)
            await asyncio.sleep(gap)
    base = p50(create["tmpfs"])
    print(f"disk_mb={disk_mb}, {rounds} rounds, gap {gap}s")
    print(f"{'upper':8s} {'create p50':>11s} {'ratio':>6s} {'upper p50':>10s} {'delete p50':>11s}")
    for kind in KINDS:
        print(f"{kind:8s} {p50(create[kind]):9.1f}ms {p50(create[kind]) / base:6.3f} "
              f"{p50(upper_ms[kind]):8.2f}ms {p50(delete[kind]):9.1f}ms")
    for backend in backends.values():
        await backend.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--disk-mb", type=int, default=1024)
    parser.add_argument("--gap", type=float, default=0.3)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (crun, mounts)")
    namespaces.enter_private_mount_namespace()
    work = tempfile.mkdtemp(prefix="corral-bench-disk-")
    try:
        asyncio.run(run(work, busybox_layer(work), args.rounds, args.disk_mb, args.gap))
    finally:
        mounts.umount_tree(work)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
