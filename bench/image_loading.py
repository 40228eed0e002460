"""Image loading: full pull vs eager layers vs lazy (chunked, on demand) layers.

One run, scaled to one machine: ``--envs`` environments share one base layer and each has
its own workspace layer (a repository-like tree); ``--tasks`` tasks (spread evenly over the
environments) each read ``--read-pct`` percent of their image, ``--concurrency`` at a time.

Modes, each from an empty node cache and (by default) a dropped page cache:

- full:  download the environment as one tar.gz (base + workspace) and extract it to local
         disk before the task starts (what a registry pull + unpack does); once per env.
- eager: LayerCache(mode="eager"): whole EROFS blobs downloaded, checked, mounted.
- lazy:  LayerCache(mode="lazy"): chunk index fetched, EROFS mounted on the FUSE file,
         chunks fetched on first read into the node-wide chunk cache.

Reported per mode: batch completion time, bytes transferred from the image store, bytes
written to local disk by this process (``/proc/self/io`` write_bytes: the node side only;
the image-service runs in another process), cache hit rate, and the cold start of a first
sandbox (empty cache: image ready + first file read).

Needs root, /dev/fuse, mkfs.erofs. ``python bench/image_loading.py [--envs 16 --tasks 64]``.
Generated trees and the image-service data are kept in ``--work-dir`` between runs.
"""

import argparse
import asyncio
import json
import os
import random
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from shaped_link import ShapedLink, parse_link

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def io_write_bytes(pid: int | None = None) -> int:
    with open(f"/proc/{pid or 'self'}/io") as fh:
        for line in fh:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU of a process (this one by default)."""
    with open(f"/proc/{pid or 'self'}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def servers_cpu_seconds(svc: "Services") -> float:
    """image-service + the archive server."""
    return sum(cpu_seconds(p.pid) for p in svc.procs)


def children_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def drop_caches() -> None:
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
    except OSError:
        pass


# ---- data set ---------------------------------------------------------------------------

WORDS = ("def class return import self if else for while in not and or None True False try "
         "except raise with as yield lambda async await print len range list dict set tuple "
         "value result data index count name path file config test assert error self.state "
         "request response client server handler module package build install update").split()


def text_pool(seed: int, size: int) -> bytes:
    rnd = random.Random(seed)
    out, n = [], 0
    while n < size:
        line = "    " * rnd.randint(0, 3) + " ".join(rnd.choices(WORDS, k=rnd.randint(3, 12))) + "\n"
        out.append(line)
        n += len(line)
    return "".join(out).encode()[:size]


def make_tree(root: Path, seed: int, total_mb: int, pool: bytes, prefix: str) -> list[tuple[str, int]]:
    """A repository-like tree: nested dirs, mostly text files (a few KB to ~100 KB) and some
    binary ones. Returns [(relative path, size)]."""
    rnd = random.Random(seed)
    target = total_mb * 1024 * 1024
    files, n, i = [], 0, 0
    while n < target:
        d = f"{prefix}/{rnd.choice(['src', 'lib', 'tests', 'docs', 'vendor'])}/m{rnd.randint(0, 40)}/p{rnd.randint(0, 8)}"
        size = min(int(rnd.lognormvariate(9.2, 1.0)), 256 * 1024) + 64
        rel = f"{d}/f{i}.{'bin' if rnd.random() < 0.1 else 'py'}"
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith(".bin"):
            data = rnd.randbytes(size)
        else:
            off = rnd.randrange(0, len(pool) - size)
            data = f"# {seed}/{i}\n".encode() + pool[off:off + size]
        p.write_bytes(data)
        files.append((rel, len(data)))
        n += len(data)
        i += 1
    return files


def build_dataset(work: Path, envs: int, base_mb: int, ws_mb: int) -> dict:
    manifest_path = work / "manifest.json"
    want = {"envs": envs, "base_mb": base_mb, "ws_mb": ws_mb}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("params") == want:
            return manifest
    shutil.rmtree(work / "trees", ignore_errors=True)
    pool = text_pool(1, 16 * 1024 * 1024)
    t0 = time.monotonic()
    manifest = {"params": want, "base": make_tree(work / "trees/base", 1000, base_mb, pool, "usr"), "ws": []}
    for e in range(envs):
        manifest["ws"].append(make_tree(work / f"trees/ws{e}", 2000 + e, ws_mb, pool, "work"))
    print(f"generated trees in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    manifest_path.write_text(json.dumps(manifest))
    return manifest


# ---- services ---------------------------------------------------------------------------


class Services:
    """image-service and the archive server: on loopback, or behind a ``ShapedLink``."""

    def __init__(self, work: Path, chunk_kb: int, link: ShapedLink | None = None):
        self.work = work
        self.chunk_kb = chunk_kb
        self.link = link
        self.procs: list[subprocess.Popen] = []
        # image-service wants the internal token on every call but /healthz.
        self.token = secrets.token_urlsafe(16)

    def start(self) -> None:
        self.image_port, self.archive_port = free_port(), free_port()
        ip = self.link.remote_ip if self.link else "127.0.0.1"
        prefix = self.link.exec_prefix if self.link else []
        env = dict(os.environ, CORRAL_IMAGE_DATA_DIR=str(self.work / "image-service"), CORRAL_IMAGE_HOST=ip,
                   CORRAL_IMAGE_PORT=str(self.image_port), CORRAL_IMAGE_CHUNK_SIZE_KB=str(self.chunk_kb),
                   CORRAL_LOG_LEVEL="WARNING", CORRAL_INTERNAL_TOKEN=self.token)
        log = open(self.work / "image-service.log", "ab")
        self.procs.append(subprocess.Popen([*prefix, PY, "-m", "corral_image_service"], env=env, stdout=log, stderr=log))
        (self.work / "archives").mkdir(exist_ok=True)
        self.procs.append(subprocess.Popen(
            [*prefix, PY, "-m", "http.server", str(self.archive_port), "--bind", ip,
             "--directory", str(self.work / "archives")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.image_url = f"http://{ip}:{self.image_port}"
        self.archive_url = f"http://{ip}:{self.archive_port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.image_url}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            raise RuntimeError("image-service did not start")
        if self.link:
            # Every request from here on, the node's included, pays the link's round trip.
            self.image_url, self.archive_url = self.link.forward(self.image_port, self.archive_port)
            self.procs.append(self.link.proxy)

    def stop(self) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def register(svc: Services, envs: int) -> list[str]:
    names = []
    with httpx.Client(base_url=svc.image_url, timeout=600, headers={"X-Corral-Internal-Token": svc.token}) as c:
        def layer(kind: str, name: str, tree: Path) -> None:
            r = c.post("/v1/layers", params={"kind": kind, "name": name, "version": "1", "source_dir": str(tree)})
            r.raise_for_status()

        layer("base", "bench-base", svc.work / "trees/base")
        for e in range(envs):
            layer("workspace", f"bench-ws{e}", svc.work / f"trees/ws{e}")
            name = f"bench-env{e}"
            r = c.post("/v1/environments", json={"name": name, "base": "bench-base:1", "workspace": f"bench-ws{e}:1"})
            r.raise_for_status()
            names.append(name)
            archive = svc.work / f"archives/{name}.tar.gz"
            if not archive.exists():
                subprocess.run(["tar", "-I", "gzip -1", "-cf", str(archive) + ".tmp",
                                "-C", str(svc.work / "trees/base"), ".", "-C", str(svc.work / f"trees/ws{e}"), "."],
                               check=True)
                os.replace(str(archive) + ".tmp", archive)
    return names


# ---- the node side ----------------------------------------------------------------------


def _packages(files: list) -> dict[str, list]:
    """Files grouped by package (``prefix/top/mN``), a subtree EROFS lays out contiguously."""
    pkgs: dict[str, list] = {}
    for rel, size in files:
        pkgs.setdefault("/".join(rel.split("/")[:3]), []).append((rel, size))
    return pkgs


def _pick_packages(rnd: random.Random, files: list, budget: float, exclude: set = frozenset()) -> list:
    """Whole packages until the budget: a task works on a few packages, not on random files."""
    pkgs = _packages(files)
    picked, n = [], 0
    for name in rnd.sample(sorted(pkgs), len(pkgs)):
        if n >= budget:
            break
        if name in exclude:
            continue
        picked += pkgs[name]
        n += sum(s for _, s in pkgs[name])
    return picked


def plan_tasks(manifest: dict, envs: int, tasks: int, read_pct: float, seed: int = 7) -> list[dict]:
    """Each task reads read_pct of its image: the same 1% of the base (the interpreter and
    its libraries, shared by every task), 1% of its workspace that every task of that
    environment reads (build files, the harness, the core package), and packages of its own.
    """
    rnd = random.Random(seed)
    base_files = manifest["base"]
    base_bytes = sum(s for _, s in base_files)
    common = _pick_packages(rnd, base_files, base_bytes / 100)
    hot = {}
    out = []
    for t in range(tasks):
        e = t % envs
        ws = manifest["ws"][e]
        image_bytes = base_bytes + sum(s for _, s in ws)
        if e not in hot:
            hot[e] = _pick_packages(random.Random(seed * 1000 + e), ws, image_bytes / 100)
        hot_pkgs = {"/".join(r.split("/")[:3]) for r, _ in hot[e]}
        have = sum(s for _, s in common) + sum(s for _, s in hot[e])
        own = _pick_packages(rnd, ws, image_bytes * read_pct / 100 - have, exclude=hot_pkgs)
        files = hot[e] + own
        out.append({"env": e, "base": [r for r, _ in common], "ws": [r for r, _ in files],
                    "bytes": sum(s for _, s in files) + sum(s for _, s in common), "image_bytes": image_bytes})
    return out


def read_files(paths: list[str]) -> int:
    n = 0
    for p in paths:
        with open(p, "rb") as fh:
            while chunk := fh.read(1 << 20):
                n += len(chunk)
    return n


class FullPull:
    """Download the environment's archive, extract it to local disk, once per environment."""

    def __init__(self, svc: Services, state: Path):
        self.svc, self.state = svc, state
        self.client = httpx.AsyncClient(base_url=svc.archive_url, timeout=600)
        self.pulls: dict[int, asyncio.Future] = {}
        self.transferred = 0
        self.requests = self.hits = 0

    async def prepare(self, env: int) -> tuple[str, str]:
        self.requests += 1
        fut = self.pulls.get(env)
        if fut is None:
            fut = self.pulls[env] = asyncio.ensure_future(self._pull(env))
        else:
            self.hits += 1
        root = await fut
        return root, root

    async def _pull(self, env: int) -> str:
        archive = self.state / f"env{env}.tar.gz"
        root = self.state / f"env{env}"
        root.mkdir(parents=True)
        with open(archive, "wb") as fh:  # noqa: ASYNC230
            async with self.client.stream("GET", f"/bench-env{env}.tar.gz") as resp:
                resp.raise_for_status()
                async for chunk in resp.aiter_bytes(1 << 20):
                    self.transferred += len(chunk)
                    fh.write(chunk)
        proc = await asyncio.create_subprocess_exec("tar", "-xzf", str(archive), "-C", str(root))
        if await proc.wait() != 0:
            raise RuntimeError("extract failed")
        archive.unlink()
        return str(root)

    async def done(self, env: int) -> None:
        pass

    def stats(self) -> dict:
        return {"transferred": self.transferred, "hit_rate": self.hits / max(1, self.requests)}

    async def aclose(self) -> None:
        await self.client.aclose()


class Layers:
    def __init__(self, svc: Services, state: Path, mode: str, env_layers: dict[int, list]):
        from corral_node_agent.layers import LayerCache
        from corral_node_agent.settings import LayerSettings

        self.mode = mode
        self.cache = LayerCache(LayerSettings(state_dir=str(state), image_service_url=svc.image_url, mode=mode,
                                              internal_token=svc.token, cache_mb=100 * 1024, fetch_deadline_s=30,
                                              prefetch=False))
        self.env_layers = env_layers
        self.requests = 0

    async def prepare(self, env: int) -> tuple[str, str]:
        layers = self.env_layers[env]
        self.requests += len(layers)
        base, ws = await self.cache.acquire(layers)
        return base, ws

    async def done(self, env: int) -> None:
        await self.cache.release(self.env_layers[env])

    def stats(self) -> dict:
        if self.mode == "lazy":
            s = self.cache.lazy.stats()
            index_bytes = sum(len(i.chunks) * 72 + 150 for i in self.cache.lazy.indexes.values())
            return {"transferred": s.fetched_bytes + index_bytes, "hit_rate": s.hit_rate,
                    "chunks_fetched": s.fetched, "chunks_read_ahead": s.readahead,
                    "fetch_requests": s.fetch_requests, "chunk_lookups": s.requests}
        sizes = {layer.digest: layer.size for layers in self.env_layers.values() for layer in layers}
        got = [d for d in sizes if os.path.exists(self.cache.store.path(d))]
        # A layer request that caused no download (blob present, or another task's download).
        return {"transferred": sum(sizes[d] for d in got), "hit_rate": 1 - len(got) / max(1, self.requests)}

    def server_usage(self) -> tuple[int, float]:
        """Disk writes and CPU seconds of the lazy-layer server (a process of its own, started
        for this mode's state dir: its whole life is this mode's work)."""
        pid = self.cache.lazy.server.pid if self.mode == "lazy" else None
        return (io_write_bytes(pid), cpu_seconds(pid)) if pid else (0, 0.0)

    async def aclose(self) -> None:
        await self.cache.aclose()


async def run_mode(mode: str, svc: Services, plan: list[dict], env_layers: dict, state: Path,
                   concurrency: int) -> dict:
    node = FullPull(svc, state) if mode == "full" else Layers(svc, state, mode, env_layers)
    if mode == "lazy":
        await node.cache.lazy.start()  # as the agent does at its start: not the batch's cost
    sem = asyncio.Semaphore(concurrency)
    read = 0

    async def task(t: dict) -> None:
        nonlocal read
        async with sem:
            base, ws = await node.prepare(t["env"])
            paths = [f"{base}/{r}" for r in t["base"]] + [f"{ws}/{r}" for r in t["ws"]]
            n = await asyncio.to_thread(read_files, paths)
            read += n
            await node.done(t["env"])

    w0 = io_write_bytes()
    c0, s0, ch0 = cpu_seconds(), servers_cpu_seconds(svc), children_cpu_seconds()
    t0 = time.monotonic()
    await asyncio.gather(*(task(t) for t in plan))
    elapsed = time.monotonic() - t0
    written = io_write_bytes() - w0
    # CPU of the node side (this process, its children: tar, the lazy-layer server) and of
    # image-service.
    node_cpu = cpu_seconds() - c0 + children_cpu_seconds() - ch0
    if isinstance(node, Layers):
        server_written, server_node_cpu = node.server_usage()
        written += server_written
        node_cpu += server_node_cpu
    server_cpu = servers_cpu_seconds(svc) - s0
    stats = node.stats()
    await node.aclose()
    expected = sum(t["bytes"] for t in plan)
    assert read == expected, (read, expected)
    return {"mode": mode, "seconds": round(elapsed, 2), "read_bytes": read, "written_bytes": written,
            "node_cpu_s": round(node_cpu, 2), "server_cpu_s": round(server_cpu, 2), **stats}


async def cold_start(mode: str, svc: Services, plan: list[dict], env_layers: dict, state: Path) -> float:
    node = FullPull(svc, state) if mode == "full" else Layers(svc, state, mode, env_layers)
    if mode == "lazy":
        await node.cache.lazy.start()  # as the agent does at its start: not the image's cost
    t = plan[0]
    t0 = time.monotonic()
    base, ws = await node.prepare(t["env"])
    await asyncio.to_thread(read_files, [f"{ws}/{t['ws'][0]}"])
    elapsed = time.monotonic() - t0
    await node.done(t["env"])
    await node.aclose()
    return elapsed


def mib(n: int) -> str:
    return f"{n / 1048576:.1f}"


async def main_async(args: argparse.Namespace) -> dict:
    from corral_common.contracts.images import ImageServiceClient

    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - set-up, before anything is timed
    manifest = build_dataset(work, args.envs, args.base_mb, args.ws_mb)
    link = ShapedLink(*args.link) if args.link else None
    svc = Services(work, args.chunk_kb, link)
    try:
        if link:
            link.open()
        svc.start()
        t0 = time.monotonic()
        names = await asyncio.to_thread(register, svc, args.envs)
        print(f"layers, chunks and archives ready in {time.monotonic() - t0:.1f}s", file=sys.stderr)
        images = ImageServiceClient(svc.image_url, internal_token=svc.token)
        env_layers = {e: (await images.environment(n)).layers for e, n in enumerate(names)}
        await images.aclose()
        plan = plan_tasks(manifest, args.envs, args.tasks, args.read_pct)
        results = []
        for mode in args.modes:
            state = Path(args.state_dir) / mode
            for attempt in ("cold", "batch"):
                shutil.rmtree(state, ignore_errors=True)
                state.mkdir(parents=True)
                if not args.no_drop_caches:
                    drop_caches()
                if attempt == "cold":
                    cold = await cold_start(mode, svc, plan, env_layers, state)
                else:
                    r = await run_mode(mode, svc, plan, env_layers, state, args.concurrency)
                    r["cold_start_s"] = round(cold, 3)
                    results.append(r)
                    print(json.dumps(r), file=sys.stderr)
            shutil.rmtree(state, ignore_errors=True)
        blobs = {layer.digest: layer.size for layers in env_layers.values() for layer in layers}
        image = plan[0]["image_bytes"]
        return {"params": vars(args), "tasks": len(plan), "envs": args.envs,
                "image_bytes_per_env": image,
                "read_pct_actual": round(100 * sum(t["bytes"] for t in plan) / len(plan) / image, 2),
                "erofs_bytes_all_layers": sum(blobs.values()), "results": results,
                "link_rtt_ms": link.measured_rtt_ms if link else None}
    finally:
        svc.stop()
        if link:
            link.close()


def report(out: dict) -> str:
    rows = {r["mode"]: r for r in out["results"]}
    lines = [f"{out['tasks']} tasks over {out['envs']} environments (one shared base), "
             f"{mib(out['image_bytes_per_env'])} MiB per image, each task reads {out['read_pct_actual']}%, "
             f"concurrency {out['params']['concurrency']}, chunks {out['params']['chunk_kb']} KiB, "
             + (f"link {out['params']['link'][0]}, RTT {out['link_rtt_ms']} ms (asked {out['params']['link'][1]})"
                if out["params"].get("link") else "loopback"),
             "",
             "| mode | batch s | transferred MiB | written to disk MiB | cache hit rate | first sandbox cold start s "
             "| CPU s node / servers | requests (lazy: chunks fetched) |",
             "|---|---|---|---|---|---|---|---|"]
    for m in ("full", "eager", "lazy"):
        if m in rows:
            r = rows[m]
            lines.append(f"| {m} | {r['seconds']} | {mib(r['transferred'])} | {mib(r['written_bytes'])} | "
                         f"{r['hit_rate']:.2f} | {r['cold_start_s']} | {r['node_cpu_s']} / {r['server_cpu_s']} | "
                         + (f"{r['fetch_requests']} ({r['chunks_fetched']}, {r['chunks_read_ahead']} read ahead) |"
                            if m == "lazy" else "|"))
    if "full" in rows and "lazy" in rows:
        f, lz = rows["full"], rows["lazy"]
        lines.append("")
        lines.append(f"lazy vs full pull: {f['seconds'] / lz['seconds']:.2f}x faster, "
                     f"{100 * (1 - lz['written_bytes'] / max(1, f['written_bytes'])):.0f}% fewer disk writes, "
                     f"{100 * (1 - lz['transferred'] / max(1, f['transferred'])):.0f}% fewer bytes transferred")
    if "eager" in rows and "lazy" in rows:
        e, lz = rows["eager"], rows["lazy"]
        lines.append(f"lazy vs eager: {e['seconds'] / lz['seconds']:.2f}x faster, "
                     f"{100 * (1 - lz['written_bytes'] / max(1, e['written_bytes'])):.0f}% fewer disk writes")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=16)
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--base-mb", type=int, default=48)
    ap.add_argument("--ws-mb", type=int, default=32)
    ap.add_argument("--read-pct", type=float, default=3.0)
    ap.add_argument("--chunk-kb", type=int, default=512)
    ap.add_argument("--modes", nargs="+", default=["full", "eager", "lazy"])
    ap.add_argument("--work-dir", default="/var/tmp/corral-bench-images")
    ap.add_argument("--state-dir", default="/var/tmp/corral-bench-images-node")
    ap.add_argument("--no-drop-caches", action="store_true", help="keep the page cache between modes")
    ap.add_argument("--link", type=parse_link, metavar="RATE:RTT",
                    help="reach the image store through a shaped link (e.g. 1gbit:0.5ms): a netns of our own, a "
                         "veth pair with tbf at RATE each way, and a proxy adding RTT/2 each way (bench/shaped_link.py)")
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (mounts)")
    from corral_host.namespaces import enter_private_mount_namespace

    enter_private_mount_namespace()  # single-threaded still; our mounts vanish with us
    out = asyncio.run(main_async(args))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    print(report(out))


if __name__ == "__main__":
    main()
