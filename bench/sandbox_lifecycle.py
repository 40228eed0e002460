#!/usr/bin/env python3
"""Sandbox lifecycle benchmark: Corral through its public API vs. raw crun, in one run.

    python bench/sandbox_lifecycle.py --n 200 --concurrency 8 --nodes 2 \
        --json bench/results/sandbox_lifecycle.json

Without --url/--api-key it brings its own platform up (scripts/corral_platform.py, temp state
dir, non-default ports) and tears it down at the end. Must run as root (the raw floor runs
crun directly, in a private mount namespace with the cgroup2 mount hidden).

Phases (environment "busybox", the default spec unless --memory-mb/--cpu/--pids-limit/--disk-mb):
  corral serial      N x [create(wait=True) -> exec(["true"]) -> delete(wait=True)], one at a time
  corral concurrent  N creates with C in flight (wall time -> creations/s), then the first exec of
                     each with C in flight, then the deletes with C in flight
  raw floor          the same two shapes with `crun run --detach` / `crun exec true` /
                     `crun delete --force` on a busybox rootfs, no Corral in between
"""

import argparse
import asyncio
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "clients" / "python"))
sys.path.insert(0, str(ROOT / "bench"))
from platform_cpu import cpu_per_op, cpu_snapshot  # noqa: E402

# Same PID 1 as the node-agent's sandboxes (corral_node_agent/backends/container/oci.py
# INIT_ARGS): the host's catatonit, bound in, in pause mode.
INIT_BINARY = "/usr/bin/catatonit"
INIT_ARGS = ["/dev/init", "-P"]
CGROUP_PARENT = "/corral-bench"

TARGETS = {  # metric -> (op, value) for the table
    "create_running_p50_ms": ("<=", 60.0),
    "first_exec_p50_ms": ("<=", 20.0),
    "creations_per_s": (">=", 50.0),
    "overhead_ratio": ("<=", 3.0),
}


# ---------------------------------------------------------------------------------- stats

def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(values_ms: list[float]) -> dict:
    if not values_ms:
        return {"n": 0}
    return {"n": len(values_ms), "p50": round(pct(values_ms, 50), 2), "p90": round(pct(values_ms, 90), 2),
            "p99": round(pct(values_ms, 99), 2), "mean": round(statistics.fmean(values_ms), 2),
            "min": round(min(values_ms), 2), "max": round(max(values_ms), 2)}


# ---------------------------------------------------------------------------- raw floor

def _libc_mount():
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

    def mount(src: str, target: str, fstype: str, data: str) -> None:
        if libc.mount(src.encode(), target.encode(), fstype.encode(), 0, data.encode()) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {fstype} {target}: {os.strerror(err)}")

    def umount(target: str) -> None:
        if libc.umount2(target.encode(), 2) != 0:  # MNT_DETACH
            err = ctypes.get_errno()
            raise OSError(err, f"umount {target}: {os.strerror(err)}")

    return mount, umount


def floor_worker(n: int, concurrency: int, work: str) -> dict:
    """Runs inside `unshare -m` with /sys/fs/cgroup/unified unmounted; prints JSON."""
    from corral_host.cgroups.detect import cgroup_driver

    crun = shutil.which("crun") or "crun"
    w = Path(work)
    rootfs, crun_root = w / "rootfs", w / "crun"
    (rootfs / "bin").mkdir(parents=True)
    crun_root.mkdir(mode=0o700)
    for d in ("proc", "dev", "sys", "tmp", "etc", "root", "home/user"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2("/bin/busybox", rootfs / "bin" / "busybox")
    subprocess.run(["chroot", str(rootfs), "/bin/busybox", "--install", "-s"], check=True)
    tmpl = w / "tmpl"
    tmpl.mkdir()
    subprocess.run([crun, "spec"], cwd=tmpl, check=True)
    base = json.loads((tmpl / "config.json").read_text())
    base["root"] = {"path": str(rootfs), "readonly": False}
    base["process"]["args"] = list(INIT_ARGS)
    base["mounts"].append({"destination": INIT_ARGS[0], "type": "bind", "source": INIT_BINARY,
                           "options": ["bind", "ro", "nosuid", "nodev"]})
    base["process"]["terminal"] = False
    ns = base["linux"]["namespaces"]
    if not any(x["type"] == "network" for x in ns):
        ns.append({"type": "network"})
    bundles = w / "bundles"
    bundles.mkdir()
    devnull = os.open(os.devnull, os.O_RDWR)

    def call(*args: str) -> float:
        t = time.perf_counter()
        rc = subprocess.call([crun, "--root", str(crun_root), *args], stdin=devnull, stdout=devnull, stderr=devnull)
        dt = (time.perf_counter() - t) * 1000
        if rc != 0:
            raise RuntimeError(f"crun {' '.join(args)} -> {rc}")
        return dt

    def bundle(cid: str) -> str:
        cfg = json.loads(json.dumps(base))
        cfg["hostname"] = cid
        cfg["linux"]["cgroupsPath"] = f"{CGROUP_PARENT}/{cid}"
        d = bundles / cid
        d.mkdir()
        (d / "config.json").write_text(json.dumps(cfg))
        return str(d)

    res: dict = {"crun_version": subprocess.run([crun, "--version"], capture_output=True, text=True).stdout.split("\n")[0]}
    live: set[str] = set()
    try:
        # serial: run -d, exec true, delete --force, one container at a time
        run_ms, exec_ms, del_ms = [], [], []
        for i in range(n):
            cid = f"bench-s{i}"
            b = bundle(cid)
            live.add(cid)
            run_ms.append(call("run", "--detach", "--bundle", b, cid))
            exec_ms.append(call("exec", cid, "true"))
            del_ms.append(call("delete", "--force", cid))
            live.discard(cid)
        res["serial"] = {"run": summary(run_ms), "exec": summary(exec_ms), "delete": summary(del_ms),
                         "cycle": summary([a + b + c for a, b, c in zip(run_ms, exec_ms, del_ms)])}

        # what Corral adds per sandbox before crun: tmpfs upper + overlay root (mount + umount)
        mount, umount = _libc_mount()
        mnt_ms, umnt_ms = [], []
        m = w / "mnt"
        for i in range(min(n, 100)):
            up, root = m / f"u{i}", m / f"r{i}"
            up.mkdir(parents=True)
            root.mkdir()
            t = time.perf_counter()
            mount("tmpfs", str(up), "tmpfs", "size=1024m,mode=755")
            (up / "upper").mkdir()
            (up / "work").mkdir()
            mount("overlay", str(root), "overlay", f"lowerdir={rootfs},upperdir={up}/upper,workdir={up}/work")
            mnt_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            umount(str(root))
            umount(str(up))
            umnt_ms.append((time.perf_counter() - t) * 1000)
        res["overlay_tmpfs"] = {"mount": summary(mnt_ms), "umount": summary(umnt_ms)}

        # concurrent: N run -d with C in flight (wall -> runs/s), then exec, then delete
        ids = [f"bench-c{i}" for i in range(n)]
        paths = {cid: bundle(cid) for cid in ids}

        def start(cid: str) -> float:
            live.add(cid)
            return call("run", "--detach", "--bundle", paths[cid], cid)

        with ThreadPoolExecutor(concurrency) as pool:
            t = time.perf_counter()
            crun_run = list(pool.map(start, ids))
            wall_run = time.perf_counter() - t
            crun_exec = list(pool.map(lambda c: call("exec", c, "true"), ids))
            t = time.perf_counter()
            crun_del = list(pool.map(lambda c: call("delete", "--force", c), ids))
            wall_del = time.perf_counter() - t
        live.difference_update(ids)
        res["concurrent"] = {"concurrency": concurrency, "run": summary(crun_run), "exec": summary(crun_exec),
                             "delete": summary(crun_del), "run_wall_s": round(wall_run, 3),
                             "runs_per_s": round(n / wall_run, 1), "delete_wall_s": round(wall_del, 3)}
    finally:
        for cid in list(live):
            subprocess.call([crun, "--root", str(crun_root), "delete", "--force", cid],
                            stdin=devnull, stdout=devnull, stderr=devnull)
        # Every hierarchy, and the litter crun leaves under the unmounted cgroup2 dir.
        cgroup_driver().cgroup(CGROUP_PARENT).remove()
    return res


def run_floor(n: int, concurrency: int, tmp_root: str) -> dict:
    work = tempfile.mkdtemp(prefix="floor-", dir=tmp_root)
    inner = " ".join(shlex.quote(a) for a in [sys.executable, os.path.abspath(__file__), "--_floor-worker",
                                               "--n", str(n), "--concurrency", str(concurrency),
                                               "--_work", work])
    script = f"umount /sys/fs/cgroup/unified 2>/dev/null; exec {inner}"
    try:
        out = subprocess.run(["unshare", "-m", "--propagation", "slave", "sh", "-c", script],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"raw floor failed ({out.returncode}): {out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------------------- corral

def _metric_sum(text: str, prefix: str, label: str = "") -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(prefix) and label in line)


async def pool_hits(node_urls: list[str]) -> int:
    """Creates the nodes' warm pools served so far (their /metrics)."""
    import httpx

    async with httpx.AsyncClient(timeout=5) as client:
        return int(sum([_metric_sum((await client.get(f"{url}/metrics")).text,
                                    "corral_node_agent_warm_pool_creates{", 'outcome="hit"') for url in node_urls]))


async def pools_full(node_urls: list[str], size: int, timeout_s: float = 300.0) -> float:
    """Wait until every node-agent that was asked for the bench's shape (a node pools only what
    it was asked for) has ``size`` containers of it started ahead (its /metrics); the seconds it took."""
    import httpx

    t = time.perf_counter()
    async with httpx.AsyncClient(timeout=5) as client:
        while True:
            ready = []
            for url in node_urls:
                text = (await client.get(f"{url}/metrics")).text
                if _metric_sum(text, "corral_node_agent_warm_pool_creates{"):
                    ready.append(_metric_sum(text, "corral_node_agent_warm_pool_ready{"))
            if ready and all(r >= size for r in ready):
                return round(time.perf_counter() - t, 2)
            if time.perf_counter() - t > timeout_s:
                raise RuntimeError(f"warm pools not full after {timeout_s} s: {ready}")
            await asyncio.sleep(0.5)


async def corral_phases(url: str, key: str, n: int, concurrency: int, memory_mb: int | None, serial_n: int,
                        cpu: float | None, pids_limit: int | None, disk_mb: int | None, node_urls: list[str] | None = None,
                        warm_pool: int = 0, state: str | None = None) -> dict:
    """With ``warm_pool`` (and the nodes' urls), each timed phase starts once every node's pool is full
    (the fill is not timed: a warm pool is what a node has ready before a burst). With our platform's
    ``state`` dir, the concurrent creates' CPU per create of each part is recorded too."""
    from corral import AsyncCorral

    res: dict = {}
    size = {k: v for k, v in {"memory_mb": memory_mb, "cpu": cpu, "pids_limit": pids_limit, "disk_mb": disk_mb}.items()
            if v is not None}  # unset: the api's defaults (limits; placement counts the default requests)
    async with AsyncCorral(url, key) as corral:
        # warm-up: connection, environment cache, layer mount on the nodes (and their warm pools' shape)
        warm = await corral.sandboxes.create_many("busybox", 8, concurrency=8, **size)
        for sb in warm:
            await sb.exec(["true"])
        await asyncio.gather(*(sb.delete(wait=True) for sb in warm))
        if warm_pool and node_urls:
            res["pool_fill_s"] = [await pools_full(node_urls, warm_pool)]

        # serial
        c_ms, e_ms, d_ms, trace, pooled = [], [], [], [], 0
        for _ in range(serial_n):
            w0 = time.time()
            t0 = time.perf_counter()
            sb = await corral.sandboxes.create("busybox", **size, wait=True)
            t1 = time.perf_counter()
            pooled += "warm_pool" in (sb.info.runtime or {})
            r = await sb.exec(["true"])
            t2 = time.perf_counter()
            await sb.delete(wait=True)
            t3 = time.perf_counter()
            if r.exit_code != 0 or sb.state != "terminated":
                raise RuntimeError(f"{sb.id}: exec exit {r.exit_code}, state after delete {sb.state}")
            c_ms.append((t1 - t0) * 1000)
            e_ms.append((t2 - t1) * 1000)
            d_ms.append((t3 - t2) * 1000)
            trace.append([sb.id, round(w0, 6), round(w0 + t1 - t0, 6)])  # wall clock, to join with service logs
        res["serial"] = {"create_running": summary(c_ms), "first_exec": summary(e_ms), "delete": summary(d_ms),
                         "create_trace": trace, "from_warm_pool": pooled}

        # concurrent
        gate = asyncio.Semaphore(concurrency)
        if warm_pool and node_urls:
            # A node pools only the shapes it was asked for, and the serial phase ran on one node:
            # one untimed burst first (as an RL trainer's first step is), then full pools.
            async def make():
                async with gate:
                    return await corral.sandboxes.create("busybox", **size, wait=True)
            first = await asyncio.gather(*(make() for _ in range(n)))
            await asyncio.gather(*(sb.delete(wait=True) for sb in first))
            res["pool_fill_s"].append(await pools_full(node_urls, warm_pool))

        async def timed(coro_fn):
            async with gate:
                t = time.perf_counter()
                out = await coro_fn()
                return (time.perf_counter() - t) * 1000, out

        cpu_before = cpu_snapshot(Path(state)) if state else None
        t = time.perf_counter()
        created = await asyncio.gather(*(timed(lambda: corral.sandboxes.create("busybox", **size, wait=True))
                                         for _ in range(n)),
                                       return_exceptions=True)
        wall = time.perf_counter() - t
        cpu_after = cpu_snapshot(Path(state)) if state else None
        errors = [repr(x) for x in created if isinstance(x, BaseException)]
        ok = [x for x in created if not isinstance(x, BaseException)]
        sbs = [sb for _, sb in ok]
        execs = await asyncio.gather(*(timed(lambda sb=sb: sb.exec(["true"])) for sb in sbs), return_exceptions=True)
        errors += [repr(x) for x in execs if isinstance(x, BaseException)]
        t = time.perf_counter()
        dels = await asyncio.gather(*(timed(lambda sb=sb: sb.delete(wait=True)) for sb in sbs),
                                    return_exceptions=True)
        wall_del = time.perf_counter() - t
        errors += [repr(x) for x in dels if isinstance(x, BaseException)]
        res["concurrent"] = {
            "concurrency": concurrency,
            "create_running": summary([ms for ms, _ in ok]),
            "first_exec": summary([ms for ms, _ in (x for x in execs if not isinstance(x, BaseException))]),
            "delete": summary([ms for ms, _ in (x for x in dels if not isinstance(x, BaseException))]),
            "create_wall_s": round(wall, 3), "creations_per_s": round(len(ok) / wall, 1),
            "delete_wall_s": round(wall_del, 3), "errors": errors[:20], "error_count": len(errors),
            "from_warm_pool": sum("warm_pool" in (sb.info.runtime or {}) for sb in sbs),
        }
        if cpu_before is not None and ok:
            # With a warm pool this includes the refills the creates set off while they ran.
            res["concurrent"]["cpu_ms_per_create"] = cpu_per_op(cpu_before, cpu_after, len(ok))
    return res


# ---------------------------------------------------------------------------- platform

def platform_up(state: str, nodes: int, base_port: int, redis_port: int, amqp_port: int) -> dict:
    cmd = [sys.executable, str(ROOT / "scripts/corral_platform.py"), "up", "--state-dir", state, "--nodes", str(nodes),
           "--base-port", str(base_port), "--redis-port", str(redis_port), "--amqp-port", str(amqp_port),
           "--log-level", "INFO"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def platform_down(state: str) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts/corral_platform.py"), "down", "--state-dir", state],
                   check=False, capture_output=True)


def start_profilers(state: str, out_dir: str, rate: int) -> list[subprocess.Popen]:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    os.makedirs(out_dir, exist_ok=True)
    procs = []
    for pid_file in sorted(Path(state, "run").glob("*.pid")):
        name = pid_file.stem
        if name not in ("api", "scheduler") and not name.startswith("node-"):
            continue
        procs.append(subprocess.Popen([py_spy, "record", "--pid", pid_file.read_text().strip(), "--rate", str(rate),
                                       "--format", "raw", "--nonblocking", "-o", f"{out_dir}/{name}.txt"],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def stop_profilers(procs: list[subprocess.Popen]) -> None:
    import signal

    for p in procs:
        p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def node_start_ms(state: str) -> dict:
    """The node-agents' own `sandbox.started ms=` (bundle + overlay + crun run) from their logs."""
    vals = []
    for log in Path(state, "logs").glob("node-*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if '"sandbox.started"' in line:
                try:
                    vals.append(float(json.loads(line)["ms"]))
                except (ValueError, KeyError):
                    pass
    return summary(vals)


# ------------------------------------------------------------------------------- report

def ratio(a, b):
    return round(a / b, 2) if a is not None and b else None


def build_rows(c: dict, f: dict) -> list[tuple]:
    cs, cc, fs, fc = c["serial"], c["concurrent"], f["serial"], f["concurrent"]
    conc = cc["concurrency"]
    rows = [
        # metric, corral, raw floor, target key
        ("create→running p50, serial (ms)", cs["create_running"]["p50"], fs["run"]["p50"], "create_running_p50_ms"),
        ("create→running p99, serial (ms)", cs["create_running"]["p99"], fs["run"]["p99"], None),
        (f"create→running p50, C={conc} (ms)", cc["create_running"]["p50"], fc["run"]["p50"], "create_running_p50_ms"),
        (f"create→running p99, C={conc} (ms)", cc["create_running"]["p99"], fc["run"]["p99"], None),
        ("first exec p50, serial (ms)", cs["first_exec"]["p50"], fs["exec"]["p50"], "first_exec_p50_ms"),
        ("first exec p99, serial (ms)", cs["first_exec"]["p99"], fs["exec"]["p99"], None),
        (f"first exec p50, C={conc} (ms)", cc["first_exec"]["p50"], fc["exec"]["p50"], "first_exec_p50_ms"),
        (f"first exec p99, C={conc} (ms)", cc["first_exec"]["p99"], fc["exec"]["p99"], None),
        ("delete→terminated p50, serial (ms)", cs["delete"]["p50"], fs["delete"]["p50"], None),
        (f"delete→terminated p50, C={conc} (ms)", cc["delete"]["p50"], fc["delete"]["p50"], None),
        (f"creations/s, C={conc}", cc["creations_per_s"], fc["runs_per_s"], "creations_per_s"),
    ]
    out = []
    for name, cv, fv, tkey in rows:
        r = ratio(cv, fv) if "creations/s" not in name else ratio(fv, cv)  # slowdown factor either way
        verdict = []
        if tkey:
            op, val = TARGETS[tkey]
            ok = cv is not None and (cv <= val if op == "<=" else cv >= val)
            verdict.append(f"{op}{val:g} {'ok' if ok else 'MISS'}")
        if r is not None and tkey:
            verdict.append(f"ratio≤3 {'ok' if r <= TARGETS['overhead_ratio'][1] else 'MISS'}")
        out.append((name, cv, fv, r, ", ".join(verdict)))
    return out


def print_table(rows: list[tuple]) -> str:
    head = ("metric", "corral", "raw floor", "ratio", "target")
    cells = [head] + [(a, f"{b:g}" if b is not None else "-", f"{c:g}" if c is not None else "-",
                       f"{d:g}×" if d is not None else "-", e) for a, b, c, d, e in rows]
    widths = [max(len(str(r[i])) for r in cells) for i in range(5)]
    lines = ["  ".join(str(v).ljust(widths[i]) for i, v in enumerate(r)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    text = "\n".join(lines)
    print(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200, help="sandboxes / containers per phase")
    ap.add_argument("--concurrency", type=int, default=8, help="creates in flight in the concurrent phase")
    ap.add_argument("--serial-n", type=int, default=None, help="sandboxes in the serial phase (default: --n)")
    ap.add_argument("--nodes", type=int, default=2)
    # Unset: the default spec. Placement counts requests (by default an idle sandbox's use),
    # so N default sandboxes alive at once fit the nodes.
    ap.add_argument("--memory-mb", type=int, default=None, help="memory limit per sandbox (default: the api's)")
    ap.add_argument("--cpu", type=float, default=None, help="cpu limit per sandbox (default: the api's)")
    ap.add_argument("--pids-limit", type=int, default=None, help="pids_limit per sandbox (default: the api's)")
    ap.add_argument("--disk-mb", type=int, default=None, help="disk_mb per sandbox (default: the api's)")
    ap.add_argument("--warm-pool", type=int, default=0, metavar="N",
                    help="our platform's node-agents keep N containers of the bench's shape started ahead "
                         "(CORRAL_NODE_WARM_POOL_SIZE; 0: none, every create starts its own)")
    ap.add_argument("--url", default=None, help="use this running platform instead of starting one")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--base-port", type=int, default=18300)
    ap.add_argument("--redis-port", type=int, default=18379)
    ap.add_argument("--amqp-port", type=int, default=18672)
    ap.add_argument("--keep-state", action="store_true", help="keep the temp state dir (logs) of our platform")
    ap.add_argument("--py-spy", metavar="DIR", default=None,
                    help="py-spy record (raw/collapsed) the api, scheduler and node-agents during the corral phases")
    ap.add_argument("--py-spy-rate", type=int, default=250)
    ap.add_argument("--skip-floor", action="store_true")
    ap.add_argument("--json", default=None, help="write all numbers here")
    ap.add_argument("--_floor-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--_work", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args._floor_worker:
        print(json.dumps(floor_worker(args.n, args.concurrency, args._work)))
        return
    if os.geteuid() != 0:
        raise SystemExit("run as root: the raw floor drives crun directly")
    serial_n = args.n if args.serial_n is None else args.serial_n
    started = time.time()
    tmp_root = tempfile.mkdtemp(prefix="corral-bench-")
    state = os.path.join(tmp_root, "state")
    own = not (args.url and args.api_key)
    result: dict = {
        "benchmark": "sandbox_lifecycle",
        "command": " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], os.getcwd()), *sys.argv[1:]]),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {"nproc": os.cpu_count(), "kernel": platform.release(), "machine": platform.machine(),
                 "python": platform.python_version(),
                 "mem_total_kb": next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")), None)},
        "params": {"n": args.n, "serial_n": serial_n, "concurrency": args.concurrency, "nodes": args.nodes,
                   "environment": "busybox", "memory_mb": args.memory_mb, "cpu": args.cpu,
                   "pids_limit": args.pids_limit, "disk_mb": args.disk_mb, "own_platform": own,
                   "warm_pool": args.warm_pool},
    }
    profilers: list[subprocess.Popen] = []
    try:
        if own:
            t = time.perf_counter()
            print(f"starting platform ({args.nodes} nodes) in {state} ...", file=sys.stderr)
            os.environ["CORRAL_NODE_WARM_POOL_SIZE"] = str(args.warm_pool)
            info = platform_up(state, args.nodes, args.base_port, args.redis_port, args.amqp_port)
            url, key = info["api"], info["api_key"]
            node_urls = [u for name, u in info["urls"].items() if name.startswith("node-")]
            result["platform_up_s"] = round(time.perf_counter() - t, 2)
        else:
            url, key = args.url, args.api_key
            node_urls = []
        if args.py_spy and own:
            profilers = start_profilers(state, args.py_spy, args.py_spy_rate)
            time.sleep(1.0)
        print(f"corral: serial {serial_n}, then {args.n} at concurrency {args.concurrency} ...", file=sys.stderr)
        t = time.perf_counter()
        result["corral"] = asyncio.run(corral_phases(url, key, args.n, args.concurrency, args.memory_mb, serial_n,
                                                    args.cpu, args.pids_limit, args.disk_mb, node_urls,
                                                    args.warm_pool, state if own else None))
        result["corral"]["phase_s"] = round(time.perf_counter() - t, 2)
        if profilers:
            stop_profilers(profilers)
            profilers = []
            result["py_spy_dir"] = os.path.abspath(args.py_spy)
        if own:
            result["corral"]["node_agent_start_ms"] = node_start_ms(state)
        if not args.skip_floor:
            print(f"raw floor: {args.n} crun containers serial, then {args.n} at concurrency {args.concurrency} ...",
                  file=sys.stderr)
            t = time.perf_counter()
            result["raw_floor"] = run_floor(args.n, args.concurrency, tmp_root)
            result["raw_floor"]["phase_s"] = round(time.perf_counter() - t, 2)
    finally:
        if profilers:
            stop_profilers(profilers)
        if own:
            platform_down(state)
            if args.keep_state:
                print(f"state kept in {state}", file=sys.stderr)
        if not (own and args.keep_state):
            shutil.rmtree(tmp_root, ignore_errors=True)
    result["total_s"] = round(time.time() - started, 1)
    if "raw_floor" in result:
        rows = build_rows(result["corral"], result["raw_floor"])
        result["table"] = [dict(zip(("metric", "corral", "raw_floor", "ratio", "target"), r)) for r in rows]
        print()
        print_table(rows)
        ov = result["raw_floor"]["overlay_tmpfs"]
        print(f"\nraw tmpfs+overlay mount p50 {ov['mount']['p50']} ms, umount p50 {ov['umount']['p50']} ms; "
              f"node-agent sandbox.started p50 {result['corral'].get('node_agent_start_ms', {}).get('p50')} ms; "
              f"total {result['total_s']} s")
        c = result["corral"]
        print(f"warm pool {args.warm_pool} per node: served {c['serial']['from_warm_pool']} of {serial_n} serial "
              f"creates, {c['concurrent']['from_warm_pool']} of {args.n} concurrent ones")
        per = c["concurrent"].get("cpu_ms_per_create")
        if per:
            print("CPU ms per concurrent create: " + ", ".join(f"{k} {v}" for k, v in per.items()))
    else:
        print(json.dumps(result["corral"], indent=2))
    if result["corral"]["concurrent"]["error_count"]:
        print(f"errors: {result['corral']['concurrent']['errors'][:3]}", file=sys.stderr)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
