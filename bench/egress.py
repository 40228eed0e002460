#!/usr/bin/env python3
"""What an egress allowlist costs (issue 14; docs/network.md has the numbers):

    python bench/egress.py --rounds 60 --download-mb 100

1. Create p50, `network: "none"` vs an allowlist, interleaved in one run on one
   ContainerBackend (real crun, one busybox layer, every isolation knob on): each round
   starts one sandbox of each kind in a rotating order, runs `true`, stops it, with `--gap`
   seconds between sandboxes (the namespace pool refills then).
2. The egress proxy against a direct connection, from a sandbox network namespace to an
   HTTP server in a namespace the bench makes (198.18.118.1): a `--download-mb` MB download
   (throughput) and `--requests` small requests on fresh connections (added latency). The
   client is this python (urllib) in the slot's namespace (direct: in the node's).
Needs root; runs in a private mount namespace; traffic stays in namespaces it makes.
"""

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from upper_disk import busybox_layer, p50  # noqa: E402  (also puts the services on sys.path)

from corral_host import mounts, namespaces  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.egress_upstream import make_upstream  # noqa: E402

UPSTREAM_OCTET = 118
NAME = "files.bench.test"

CLIENT = r"""
import sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
times = []
for _ in range(n):
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as r:
        size = 0
        while chunk := r.read(1 << 20):
            size += len(chunk)
    times.append(time.perf_counter() - t0)
print(size, *times)
"""


def client(url: str, n: int, netns: str | None) -> tuple[int, list[float]]:
    argv = [sys.executable, "-c", CLIENT, url, str(n)]
    if netns:
        argv = ["nsenter", f"--net={netns}", *argv]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), [float(t) for t in out[1:]]


async def creates(work: str, layer: str, rounds: int, gap: float) -> dict:
    from corral_common.contracts.exec import ExecRequest
    from corral_common.contracts.sandboxes import SandboxSpec
    from corral_node_agent.backends.container import ContainerBackend
    from corral_node_agent.backends.types import RootFs
    from corral_node_agent.settings import NodeAgentSettings

    backend = ContainerBackend(NodeAgentSettings(node_id=f"bench-egress-{uuid.uuid4().hex[:4]}",
                                                 state_dir=f"{work}/node", egress_hosts={NAME: ["198.18.118.1"]}))
    attach_ms: list[float] = []
    real_attach = backend.egress.attach

    async def timed_attach(*a, **kw):
        t0 = time.perf_counter()
        try:
            return await real_attach(*a, **kw)
        finally:
            attach_ms.append((time.perf_counter() - t0) * 1000)

    backend.egress.attach = timed_attach
    rootfs = RootFs([layer])
    specs = {"none": SandboxSpec(environment="busybox", memory_mb=64, disk_mb=256),
             "allowlist": SandboxSpec(environment="busybox", memory_mb=64, disk_mb=256,
                                      network={"allow": [f"{NAME}:8080", "10.20.0.0/16:443"]})}
    times: dict[str, list[float]] = {k: [] for k in specs}

    async def one(kind: str) -> None:
        sid = "n-" + uuid.uuid4().hex[:8]
        t0 = time.perf_counter()
        await backend.start(sid, specs[kind], rootfs)
        times[kind].append((time.perf_counter() - t0) * 1000)
        assert (await backend.exec(sid, ExecRequest(cmd=["true"], timeout_s=10))).exit_code == 0
        await backend.stop(sid)

    for kind in specs:  # warm: crun, the disk pool, the egress namespace and service
        await one(kind)
        times[kind].clear()
        await asyncio.sleep(1.0)
    order = list(specs)
    for i in range(rounds):
        for kind in order[i % 2:] + order[:i % 2]:
            await one(kind)
            await asyncio.sleep(gap)
    await backend.close()
    return {**{k: {"create_p50_ms": round(p50(v), 2), "n": len(v)} for k, v in times.items()},
            "attach_p50_ms": round(p50(attach_ms[2:]), 2)}


def make_files(www: Path, download_mb: int) -> Path:
    www.mkdir()
    with open(www / "big.bin", "wb") as fh:
        fh.truncate(download_mb * 1024 * 1024)
    (www / "small.txt").write_text("x" * 100)
    return www


async def proxy(work: str, download_mb: int, requests: int) -> dict:
    from corral_common.contracts.network import NetworkPolicy
    from corral_node_agent.network.egress import NodeEgress
    from corral_node_agent.settings import NodeAgentSettings

    www = make_files(Path(work) / "www", download_mb)
    up = make_upstream(UPSTREAM_OCTET)
    egress = NodeEgress(NodeAgentSettings(node_id="bench-egress-proxy", state_dir=f"{work}/proxy",
                                          egress_hosts={NAME: [up.address]}))
    try:
        up.serve(str(www), 8080)
        slot = await egress.attach("bench", NetworkPolicy(allow=[f"{NAME}:8080"]))
        out = {}
        for arm, url, netns in (("direct", f"http://{up.address}:8080", None),
                                ("proxy", f"http://{NAME}:8080", slot.netns_path)):
            size, (took,) = await asyncio.to_thread(client, f"{url}/big.bin", 1, netns)
            _, small = await asyncio.to_thread(client, f"{url}/small.txt", requests, netns)
            out[arm] = {"download_bytes": size, "download_s": round(took, 3),
                        "throughput_mb_s": round(size / took / 1e6, 1),
                        "request_p50_ms": round(p50([t * 1000 for t in small]), 2)}
        out["added_request_ms"] = round(out["proxy"]["request_p50_ms"] - out["direct"]["request_p50_ms"], 2)
        return out
    finally:
        await egress.close()
        up.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--gap", type=float, default=0.3)
    parser.add_argument("--download-mb", type=int, default=100)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--json", default=None, help="write the numbers here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (crun, mounts, namespaces)")
    namespaces.enter_private_mount_namespace()
    work = tempfile.mkdtemp(prefix="corral-bench-egress-")
    try:
        res = {"create": asyncio.run(creates(work, busybox_layer(work), args.rounds, args.gap)),
               "proxy": asyncio.run(proxy(work, args.download_mb, args.requests))}
    finally:
        mounts.umount_tree(work)
        shutil.rmtree(work, ignore_errors=True)
    c = res["create"]
    print(f"create p50: none {c['none']['create_p50_ms']} ms, allowlist {c['allowlist']['create_p50_ms']} ms "
          f"(+{c['allowlist']['create_p50_ms'] - c['none']['create_p50_ms']:.2f} ms; of which the egress attach "
          f"{c['attach_p50_ms']} ms), {args.rounds} rounds")
    p = res["proxy"]
    for arm in ("direct", "proxy"):
        print(f"{arm:7s} {args.download_mb} MB in {p[arm]['download_s']} s = {p[arm]['throughput_mb_s']} MB/s; "
              f"small request p50 {p[arm]['request_p50_ms']} ms")
    print(json.dumps(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
