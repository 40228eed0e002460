#!/usr/bin/env python3
"""Density benchmark: idle busybox sandboxes on one host until the target or the first resource
that runs out, through the public API (one job per batch), against the host with nothing on it.

    flock /work/wt/bench.lock python bench/density.py --target 10000 --nodes 2 \
        --json bench/results/density.json

Without --url/--api-key it starts its own platform (scripts/corral_platform.py, temp state dir,
non-default ports, the nodes' default settings). Sandboxes: busybox with the default spec (no
resource field: limits a core, 256 MiB, 1 GiB of disk, 512 tasks; requests what an idle one
uses, docs/architecture.md "Capacity"), as a trainer that asks for nothing would get them. When
the host's kernel.pid_max is below what the target's pids requests need, it is raised for the
run and put back at the end.

Every batch is one job of --batch sandboxes; the run waits until the job's sandboxes run, then
samples. At each checkpoint (--checkpoints) it also measures, with the sandboxes idle:
  host memory      MemTotal - MemAvailable, less the same figure before the first sandbox
  node-agent       RSS (sum over agents) and CPU (% of one core) over --idle-s of idleness
  exec             p50/p99 of `true` in sandboxes spread over every batch, one at a time, and
                   crun's own exec (the floor) in others of them, interleaved; the host's CPU
                   (busy, and its init's share) over that window
  list / nodes     GET /v1/sandboxes?label=bench=... (all of them) and GET /v1/nodes latency
  heartbeat        the nodes' heartbeat age (must stay under the interval) and Redis hash size
  kernel           tasks vs pid_max, cgroups, loop devices, mounts in an agent's namespace,
                   its fds vs RLIMIT_NOFILE, user namespaces vs max_user_namespaces, keys,
                   conntrack entries
It stops at the target, or at the first batch that does not all run, and names what ran out
(from the failed sandboxes' reasons, the nodes' free capacity and the kernel counters). The
floor, measured in the same run: crun's exec beside the api's (above), and the endpoints'
latency with one batch running (the first checkpoint is always the first batch). Teardown deletes every job (their
sandboxes with them), waits for the nodes to be empty, then brings the platform down (whose
cleanup removes whatever is left), also on failure or Ctrl-C.
"""

import argparse
import asyncio
import json
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "clients" / "python"))
sys.path.insert(0, str(ROOT / "bench"))

from sandbox_lifecycle import pct, summary  # noqa: E402  (same stats in every bench)

from corral_common.contracts.sandboxes import CONTAINER_REQUESTS  # noqa: E402

TARGETS = {"sandboxes": 10_000, "host_mib_per_sandbox": 1.0, "exec_p50_ms": 25.0}
# What a sandbox asks for: nothing (the api's defaults); what it reserves: the default requests.
SIZE: dict = {}
PIDS_REQUEST = CONTAINER_REQUESTS["pids"]
LABEL = {"bench": "density"}


# ------------------------------------------------------------------------------ host probes

def meminfo() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        out[key] = int(rest.split()[0])  # kB
    return out


def host_used_mib() -> float:
    m = meminfo()
    return (m["MemTotal"] - m["MemAvailable"]) / 1024


def sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", name.replace(".", "/")).read_text().strip()
    except OSError:
        return None


def set_sysctl(name: str, value: str) -> None:
    Path("/proc/sys", name.replace(".", "/")).write_text(value)


def tree(pid: int) -> list[int]:
    """pid and its descendants (children from /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return out


def rss_kib(pids: list[int]) -> int:
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def cpu_ticks(pids: list[int]) -> int:
    total = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return total


def threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def fd_count(pid: int) -> tuple[int, int | None]:
    try:
        n = len(os.listdir(f"/proc/{pid}/fd"))
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                return n, int(line.split()[3])
        return n, None
    except OSError:
        return 0, None


def kernel_counters(agent_pid: int | None) -> dict:
    """What a dense node uses of the kernel's own limits."""
    procs = [d for d in os.listdir("/proc") if d.isdigit()]
    tasks = 0
    userns = set()
    for d in procs:
        try:
            tasks += len(os.listdir(f"/proc/{d}/task"))
            userns.add(os.readlink(f"/proc/{d}/ns/user"))
        except OSError:
            pass
    cgroups = {}
    for line in Path("/proc/cgroups").read_text().splitlines()[1:]:
        name, _, num, _ = line.split()
        cgroups[name] = int(num)
    out = {
        "tasks": tasks, "pid_max": int(sysctl("kernel.pid_max") or 0),
        "threads_max": int(sysctl("kernel.threads-max") or 0),
        "user_namespaces": len(userns), "max_user_namespaces": int(sysctl("user.max_user_namespaces") or 0),
        "cgroups_memory": cgroups.get("memory"), "cgroups_pids": cgroups.get("pids"),
        "mounts_host": len(Path("/proc/self/mountinfo").read_text().splitlines()),
        "mount_max": int(sysctl("fs.mount-max") or 0),
        "conntrack": int(sysctl("net.netfilter.nf_conntrack_count") or 0),
        "file_nr": int((sysctl("fs.file-nr") or "0").split()[0]), "file_max": int(sysctl("fs.file-max") or 0),
    }
    try:
        out["key_users"] = len(Path("/proc/key-users").read_text().splitlines())
    except OSError:
        pass
    # The kernel's own memory for the sandboxes: unreclaimable slab, and in it kmalloc-1k, where
    # each memory cgroup's shrinker info lives (one 520-byte unit, in a 1 KiB slot, per 64
    # memcg-aware shrinkers, i.e. superblocks, for every memcg: sandboxes × superblocks).
    out["slab_unreclaimable_mib"] = round(meminfo()["SUnreclaim"] / 1024, 1)
    try:
        for line in Path("/proc/slabinfo").read_text().splitlines():
            fields = line.split()
            if fields and fields[0] == "kmalloc-1k":
                out["kmalloc_1k_mib"] = round(int(fields[2]) * int(fields[3]) / (1 << 20), 1)
                # Every memcg holds max_ids/64 units, where max_ids is the most shrinker ids
                # this boot has ever had (never lowered): an upper bound read from the slab
                # (other kmalloc-1k users count too), telling whether an earlier run left it high.
                if cgroups.get("memory"):
                    out["shrinker_ids_high_water_est"] = int(fields[2]) * 64 // cgroups["memory"]
    except (OSError, ValueError, IndexError):
        pass
    if agent_pid:
        try:
            out["mounts_agent_ns"] = len(Path(f"/proc/{agent_pid}/mountinfo").read_text().splitlines())
        except OSError:
            pass
        out["agent_fds"], out["agent_fd_limit"] = fd_count(agent_pid)
        out["agent_threads"] = threads(agent_pid)
    return out


# ------------------------------------------------------------------------------- platform

def platform_up(state: str, args: argparse.Namespace, env: dict[str, str]) -> dict:
    cmd = [sys.executable, str(ROOT / "scripts/corral_platform.py"), "up", "--state-dir", state,
           "--nodes", str(args.nodes), "--base-port", str(args.base_port), "--redis-port", str(args.redis_port),
           "--amqp-port", str(args.amqp_port), "--cpu-overcommit", str(args.cpu_overcommit),
           "--heartbeat-timeout", str(args.heartbeat_timeout), "--log-level", "WARNING"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, **env})
    return json.loads(out.stdout.strip().splitlines()[-1])


def platform_down(state: str) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts/corral_platform.py"), "down", "--state-dir", state],
                   check=False, capture_output=True, timeout=3600)


def node_env(args: argparse.Namespace) -> dict[str, str]:
    """The nodes' defaults, but for what the options set (docs/benchmarks.md, "Density")."""
    env = {"CORRAL_SCHEDULER_PLACEMENT_PREFETCH": str(max(256, args.batch))}
    if args.max_sandboxes:
        env["CORRAL_NODE_MAX_SANDBOXES"] = str(args.max_sandboxes)
    return env


def pids_needed(args: argparse.Namespace) -> int:
    """kernel.pid_max the target's pids reservations need: every node claims its share of
    min(pid_max, threads-max) less 4096 kept for the system (docs/architecture.md, "Capacity")."""
    per_node = -(-args.target // args.nodes) + args.batch
    return per_node * PIDS_REQUEST * args.nodes + 4096 + 4096


def service_pids(state: str) -> dict[str, int]:
    out = {}
    for f in Path(state, "run").glob("*.pid"):
        try:
            out[f.stem] = int(f.read_text().strip())
        except ValueError:
            pass
    return out


def agents_by_node(state: str) -> dict[str, int]:
    return {n: p for n, p in service_pids(state).items() if n.startswith("node-")}


async def node_of(corral, ids: list[str]) -> dict[str, str]:
    return {sid: (await corral.sandboxes.get(sid)).info.to_dict().get("node_id") for sid in ids}


def crun_exec_once(state: str, agent_pid: int, node: str, sid: str) -> float | None:
    """The same `true` run by crun itself in the same container (no api, no agent): one floor
    sample, in ms. It runs in the agent's mount namespace (where crun sees one cgroup layout)."""
    t = time.perf_counter()
    rc = subprocess.call(["nsenter", "-t", str(agent_pid), "-m", shutil.which("crun") or "crun", "--root",
                          str(Path(state, "nodes", node, "crun")), "exec", sid, "true"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - t) * 1000 if rc == 0 else None


def host_cpu() -> tuple[int, int, int]:
    """(busy, total) jiffies of the whole host, and the host init's (pid 1's) own: on a VM
    whose init is an agent of its hypervisor, that init can take a core of its own."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields), cpu_ticks([1])


def busy_pct(before: tuple[int, int, int], after: tuple[int, int, int]) -> dict:
    """Host CPU busy (% of all cores) and pid 1's (% of one core) between two host_cpu()s."""
    busy, total = after[0] - before[0], after[1] - before[1]
    cores = os.cpu_count() or 1
    return {"host_busy_pct": round(busy / max(total, 1) * 100, 1),
            "init_pct_of_core": round((after[2] - before[2]) / max(total, 1) * cores * 100, 1)}


def node_cgroups_mib(nodes: list[str]) -> float | None:
    """What the nodes' cgroups (every sandbox's processes and what the kernel charges them) use."""
    total = 0
    for node in nodes:
        try:
            total += int(Path(f"/sys/fs/cgroup/memory/corral/{node}/memory.usage_in_bytes").read_text())
        except OSError:
            return None
    return round(total / 1024 / 1024, 1)


def leftovers(state: str, ids: list[str]) -> dict:
    """What of ours is still on the host after the platform went down: sandbox cgroups, crun
    state, mounts."""
    cg = [sid for sid in ids if any(any(Path(f"/sys/fs/cgroup/{h}/corral").glob(f"*/{sid}"))
                                    for h in ("memory", "pids", "cpu,cpuacct"))]
    crun = [p.name for p in Path(state, "nodes").glob("*/crun/*") if p.is_dir()]
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if state in line]
    return {"sandbox_cgroups": len(cg), "crun_state": len(crun), "mounts": len(mounts)}


# ---------------------------------------------------------------------------------- phases

async def timed_get(http, path: str, params=None) -> tuple[float, int]:
    t = time.perf_counter()
    r = await http.get(path, params=params)
    r.raise_for_status()
    return (time.perf_counter() - t) * 1000, len(r.content)


async def checkpoint(corral, args, state: str, count: int, ids: list[str], base_used: float, redis_url: str) -> dict:
    """Everything measured at one count, with the sandboxes idle."""
    pids = service_pids(state)
    agents = [p for n, p in pids.items() if n.startswith("node-")]
    agent_tree = [q for p in agents for q in tree(p)]
    # idle: let the creates' tail settle, then take the agents' CPU over idle_s
    await asyncio.sleep(args.settle_s)
    t0, c0 = time.monotonic(), cpu_ticks(agent_tree)
    other = {n: cpu_ticks([p]) for n, p in pids.items() if not n.startswith("node-")}
    await asyncio.sleep(args.idle_s)
    dt = time.monotonic() - t0
    hz = os.sysconf("SC_CLK_TCK")
    agent_cpu = (cpu_ticks(agent_tree) - c0) / hz / dt * 100
    other_cpu = {n: round((cpu_ticks([pids[n]]) - c) / hz / dt * 100, 2) for n, c in other.items()}
    used = host_used_mib()
    agent_rss = rss_kib(agent_tree) / 1024
    res: dict = {
        "sandboxes": count, "host_used_mib": round(used, 1), "host_delta_mib": round(used - base_used, 1),
        "host_mib_per_sandbox": round((used - base_used) / max(count, 1), 3),
        "mem_available_mib": round(meminfo()["MemAvailable"] / 1024, 1),
        "agent_rss_mib": round(agent_rss, 1), "agent_cpu_pct": round(agent_cpu, 2),
        "agent_cpu_pct_per_1k": round(agent_cpu / max(count, 1) * 1000, 3),
        "services_cpu_pct": other_cpu,
        "services_rss_mib": {n: round(rss_kib([p]) / 1024, 1) for n, p in pids.items() if not n.startswith("node-")},
    }
    # exec in sandboxes spread over every batch, one at a time; the floor (crun's own exec) in
    # other sandboxes of the same sample, interleaved, so that both see the same host (a batch's
    # tail, the host's own daemons) and their ratio says what the platform adds. Never twice in a
    # row in one sandbox: an exec right after another in the same container is slower.
    sample = random.Random(count).sample(ids, min(args.exec_samples + args.floor_samples, len(ids)))
    floor_every = max(1, round(len(sample) / max(args.floor_samples, 1)))
    nodes = await node_of(corral, sample)
    by_node = agents_by_node(state)
    exec_ms, floor_ms = [], []
    cpu0 = host_cpu()
    for i, sid in enumerate(sample):
        if i % floor_every == floor_every - 1 and len(floor_ms) < args.floor_samples:
            if nodes.get(sid) in by_node and (ms := crun_exec_once(state, by_node[nodes[sid]], nodes[sid], sid)):
                floor_ms.append(ms)
            continue
        if len(exec_ms) >= args.exec_samples:
            continue
        sb = await corral.sandboxes.get(sid)
        if sb.state != "running":  # the checkpoint after a batch that did not all run
            continue
        t = time.perf_counter()
        r = await sb.exec(["true"])
        exec_ms.append((time.perf_counter() - t) * 1000)
        if r.exit_code != 0:
            raise RuntimeError(f"exec true in {sid}: exit {r.exit_code}")
    res["exec_host_cpu"] = busy_pct(cpu0, host_cpu())
    res["exec"] = summary(exec_ms)
    res["exec_floor"] = summary(floor_ms)
    res["exec_ratio"] = (round(res["exec"]["p50"] / res["exec_floor"]["p50"], 2)
                         if res["exec"].get("p50") and res["exec_floor"].get("p50") else None)
    res["node_cgroups_mib"] = node_cgroups_mib(list(agents_by_node(state)))
    http = corral.http
    lists = [await timed_get(http, "/v1/sandboxes", [("label", "bench=density"), ("state", "running")])
             for _ in range(args.list_samples)]
    res["list"] = {**summary([ms for ms, _ in lists]), "bytes": lists[-1][1]}
    pages = [await timed_get(http, "/v1/sandboxes", [("label", "bench=density"), ("limit", "100")])
             for _ in range(args.list_samples)]
    res["list_page"] = {**summary([ms for ms, _ in pages]), "bytes": pages[-1][1]}
    nodes = [await timed_get(http, "/v1/nodes") for _ in range(args.list_samples)]
    res["nodes"] = summary([ms for ms, _ in nodes])
    res["heartbeat"] = await heartbeat_probe(corral, redis_url, args.heartbeat_timeout / 5)
    res["kernel"] = kernel_counters(agents[0] if agents else None)
    res["agent_rss_kib_per_sandbox"] = round(agent_rss * 1024 / max(count, 1), 2)
    return res


async def heartbeat_probe(corral, redis_url: str, interval_s: float) -> dict:
    """The nodes' heartbeat age over two intervals (a loop that slows with the count shows up as
    an age past the interval) and the size of what a heartbeat writes (the node hash)."""
    import redis.asyncio as aioredis

    ages = []
    deadline = time.monotonic() + 2 * interval_s
    while time.monotonic() < deadline:
        r = await corral.http.get("/v1/nodes")
        ages += [n["heartbeat_age_s"] for n in r.json()["items"]]
        await asyncio.sleep(interval_s / 4)
    client = aioredis.from_url(redis_url)
    try:
        sizes = {}
        for key in await client.keys("node:*"):
            key = key.decode()
            if key.count(":") == 1:
                sizes[key] = sum(len(k) + len(v) for k, v in (await client.hgetall(key)).items())
    finally:
        await client.aclose()
    return {"age_max_s": round(max(ages), 3) if ages else None, "age_p50_s": round(pct(ages, 50), 3) if ages else None,
            "interval_s": interval_s, "node_hash_bytes": sizes}


async def explain_stop(corral, job, state: Path) -> dict:
    """Why a batch did not all run: the failed sandboxes' reasons (and the errors the nodes
    logged for them: a record names the reason only), pending ones' reasons, the nodes' free
    room and the kernel's counters."""
    out: dict = {"job_counts": job.counts}
    failed = await corral.sandboxes.list(labels={"job": job.id}, state="failed")
    reasons: dict[str, int] = {}
    errors: list[str] = []
    for sb in failed:
        d = sb.info.to_dict()
        reasons[str(d.get("reason"))] = reasons.get(str(d.get("reason")), 0) + 1
        if d.get("error") and len(errors) < 5:
            errors.append(str(d["error"])[:300])
    pending = await corral.sandboxes.list(labels={"job": job.id}, state="pending")
    pend_reasons: dict[str, int] = {}
    for sb in pending:
        reason = str(sb.info.to_dict().get("reason"))
        pend_reasons[reason] = pend_reasons.get(reason, 0) + 1
    if failed and not errors:
        errors = node_logged_errors(state, {sb.id for sb in failed})
    out.update(failed_reasons=reasons, failed_errors=errors, pending_reasons=pend_reasons)
    r = await corral.http.get("/v1/nodes")
    nodes = r.json()["items"]
    out["nodes"] = nodes
    free = {}
    for n in nodes:
        free[n["node_id"]] = {
            "sandboxes": n["max_sandboxes"] - n["used_sandboxes"], "memory_mb": n["memory_mb"] - n["used_memory_mb"],
            "cpu": round(n["cpu"] - n["used_cpu"], 3),
            "pids": None if n.get("pids") is None else n["pids"] - n["used_pids"],
            "disk_mb": None if n.get("disk_mb") is None else n["disk_mb"] - n["used_disk_mb"]}
    out["free"] = free
    return out


def node_logged_errors(state: Path, sandbox_ids: set[str], most: int = 5) -> list[str]:
    """The errors the node-agents logged for these sandboxes' failed starts, most common first."""
    counts: dict[str, int] = {}
    for log_file in sorted((state / "logs").glob("node-*.log")):
        for line in log_file.read_text(errors="replace").splitlines():
            if "sandbox.start_failed" not in line:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("sandbox_id") in sandbox_ids:
                error = str(entry.get("error") or entry.get("exception", "").splitlines()[-1:] or "")[:300]
                counts[error] = counts.get(error, 0) + 1
    return [f"{n}x {error}" for error, n in sorted(counts.items(), key=lambda kv: -kv[1])[:most]]


def name_limit(stop: dict, kernel: dict) -> str:
    """The first resource that ran out, in words."""
    reasons = " ".join(stop.get("failed_reasons", {})) + " " + " ".join(stop.get("failed_errors", []))
    for word, what in (("pid", "tasks (pids)"), ("memory", "memory"), ("oom", "memory"), ("loop", "loop devices"),
                       ("Too many open files", "file descriptors"), ("namespace", "user namespaces"),
                       ("ENOSPC", "disk / inotify"), ("No space", "disk / kernel table (ENOSPC)")):
        if word.lower() in reasons.lower():
            return f"{what} (from the failed sandboxes: {reasons.strip()[:200]})"
    for node, f in stop.get("free", {}).items():
        for res in ("sandboxes", "memory_mb", "cpu", "pids", "disk_mb"):
            if f.get(res) is not None and f[res] <= 0:
                return f"node {node}'s advertised {res} (scheduler keeps the rest pending)"
    if kernel.get("pid_max") and kernel["tasks"] > 0.95 * kernel["pid_max"]:
        return "kernel.pid_max"
    if meminfo()["MemAvailable"] < 512 * 1024:
        return "host memory (MemAvailable < 512 MiB)"
    return f"unclear: {json.dumps(stop)[:400]}"


async def run(args: argparse.Namespace, url: str, key: str, state: str, redis_url: str, result: dict) -> None:
    from corral import AsyncCorral

    checkpoints = sorted(set(args.checkpoints) | {args.target})
    async with AsyncCorral(url, key, timeout=600) as corral:
        jobs = result.setdefault("_jobs", [])
        try:
            # warm-up: the busybox layer mounted on every node, connections made
            warm = await corral.sandboxes.create_many("busybox", 2 * args.nodes, concurrency=4, **SIZE)
            for sb in warm:
                await sb.exec(["true"])
            await asyncio.gather(*(sb.delete(wait=True) for sb in warm))
            await asyncio.sleep(args.settle_s)
            base_used = host_used_mib()
            result["baseline"] = {"host_used_mib": round(base_used, 1),
                                  "kernel": kernel_counters(next((p for n, p in service_pids(state).items()
                                                                  if n.startswith("node-")), None))}
            pids = service_pids(state)
            result["baseline"]["agent_rss_mib"] = round(
                rss_kib([q for n, p in pids.items() if n.startswith("node-") for q in tree(p)]) / 1024, 1)
            ids: list[str] = result.setdefault("_ids", [])
            count, batch_no, ramp = 0, 0, []
            first = True  # the first batch is the floor: the same measures with few sandboxes
            pending_cps = list(checkpoints)
            ramp_deadline = time.monotonic() + args.ramp_minutes * 60
            while count < args.target:
                if time.monotonic() > ramp_deadline:
                    result["stopped"] = {"limit": f"the run's time budget (--ramp-minutes {args.ramp_minutes:g}): "
                                                  "the creation rate, not a resource"}
                    result["checkpoints"].append(await checkpoint(corral, args, state, count, ids, base_used,
                                                                  redis_url))
                    break
                n = min(args.batch, args.target - count)
                if len(ramp) >= 2:
                    # Stop before the host runs out of memory (the kernel's slab cannot be
                    # reclaimed, so the OOM killer, not a failed batch, would end the run): the
                    # next batch is assumed to cost its predecessor's growth once more.
                    last = ramp[-1]["host_used_mib"] - ramp[-2]["host_used_mib"]
                    before = ramp[-2]["host_used_mib"] - (ramp[-3]["host_used_mib"] if len(ramp) >= 3 else base_used)
                    need = (last + max(0.0, last - before)) * n / args.batch
                    available = meminfo()["MemAvailable"] / 1024
                    if available - need < 1024:
                        kern = kernel_counters(next((p for nm, p in service_pids(state).items()
                                                     if nm.startswith("node-")), None))
                        result["stopped"] = {"limit": f"host memory: the next {n} would need ~{need:.0f} MiB, "
                                                      f"{available:.0f} MiB available (unreclaimable slab "
                                                      f"{kern['slab_unreclaimable_mib']:.0f} MiB)", "kernel": kern}
                        print(f"stopped at {count}: {result['stopped']['limit']}", file=sys.stderr)
                        result["checkpoints"].append(await checkpoint(corral, args, state, count, ids, base_used,
                                                                      redis_url))
                        break
                t = time.perf_counter()
                job = await corral.jobs.create("busybox", count=n, labels={**LABEL, "batch": str(batch_no)}, **SIZE)
                jobs.append(job.id)
                try:
                    await job.wait(until="running", timeout=args.batch_timeout_s, poll_s=0.5)
                    ok = job.counts.get("running", 0) == n
                except TimeoutError:
                    ok = False
                wall = time.perf_counter() - t
                running = await corral.sandboxes.list(labels={"job": job.id}, state="running")
                ids += [sb.id for sb in running]
                count += len(running)
                ramp.append({"batch": batch_no, "asked": n, "running": len(running), "wall_s": round(wall, 2),
                             "per_s": round(len(running) / wall, 1), "total": count,
                             "host_used_mib": round(host_used_mib(), 1)})
                print(f"batch {batch_no}: {len(running)}/{n} running in {wall:.1f}s, total {count}, "
                      f"host used {ramp[-1]['host_used_mib']:.0f} MiB", file=sys.stderr)
                batch_no += 1
                if not ok:
                    stop = await explain_stop(corral, job, state)
                    kern = kernel_counters(next((p for nm, p in service_pids(state).items()
                                                 if nm.startswith("node-")), None))
                    stop["kernel"] = kern
                    stop["limit"] = name_limit(stop, kern)
                    result["stopped"] = stop
                    print(f"stopped at {count}: {stop['limit']}", file=sys.stderr)
                    result["checkpoints"].append(await checkpoint(corral, args, state, count, ids, base_used,
                                                                  redis_url))
                    break
                if first or (pending_cps and count >= pending_cps[0]):
                    while pending_cps and count >= pending_cps[0]:
                        pending_cps.pop(0)
                    cp = await checkpoint(corral, args, state, count, ids, base_used, redis_url)
                    result["checkpoints"].append(cp)
                    print(f"  @{count}: {cp['host_mib_per_sandbox']} MiB/sandbox, agent rss {cp['agent_rss_mib']} "
                          f"MiB cpu {cp['agent_cpu_pct']}%, exec p50 {cp['exec'].get('p50')} ms, list p50 "
                          f"{cp['list'].get('p50')} ms ({cp['list']['bytes']} B), nodes p50 {cp['nodes'].get('p50')} "
                          f"ms, hb age max {cp['heartbeat']['age_max_s']} s", file=sys.stderr)
                    first = False
            result["ramp"] = ramp
            result["reached"] = count
        finally:
            await teardown(corral, jobs, args, result)


async def teardown(corral, jobs: list[str], args: argparse.Namespace, result: dict) -> None:
    """Delete every job (its sandboxes with it) and wait for the nodes to hold none."""
    t = time.perf_counter()
    for job_id in jobs:
        try:
            await corral.jobs.delete(job_id)
        except Exception as exc:  # noqa: BLE001 - teardown goes on; platform down's cleanup removes the rest
            print(f"delete job {job_id}: {exc!r}", file=sys.stderr)
    deadline = time.monotonic() + args.teardown_timeout_s
    left = None
    while time.monotonic() < deadline:
        try:
            r = await corral.http.get("/v1/nodes")
            left = sum(n["used_sandboxes"] for n in r.json()["items"])
        except Exception:  # noqa: BLE001 - an api busy deleting: ask again
            left = None
        if left == 0:
            break
        await asyncio.sleep(1.0)
    result["teardown"] = {"wall_s": round(time.perf_counter() - t, 1), "left_on_nodes": left}
    print(f"teardown: {result['teardown']}", file=sys.stderr)


# ---------------------------------------------------------------------------------- report

def table(result: dict) -> str:
    head = ("sandboxes", "host MiB/sb", "cgroups MiB", "agent RSS MiB", "agent KiB/sb", "agent CPU %", "exec p50 ms",
            "crun exec p50 ms", "ratio", "exec p99 ms", "host busy %", "init % core", "list p50 ms", "list KiB", "page(100) p50 ms", "nodes p50 ms",
            "hb age max s", "tasks", "mounts(agent)", "agent fds")
    rows = [head]
    for c in result.get("checkpoints", []):
        k = c["kernel"]
        rows.append((c["sandboxes"], c["host_mib_per_sandbox"], c.get("node_cgroups_mib"), c["agent_rss_mib"],
                     c["agent_rss_kib_per_sandbox"], c["agent_cpu_pct"], c["exec"].get("p50"),
                     c["exec_floor"].get("p50"), c.get("exec_ratio"), c["exec"].get("p99"),
                     c["exec_host_cpu"]["host_busy_pct"], c["exec_host_cpu"]["init_pct_of_core"], c["list"].get("p50"),
                     round(c["list"]["bytes"] / 1024), c["list_page"].get("p50"), c["nodes"].get("p50"),
                     c["heartbeat"]["age_max_s"], k["tasks"], k.get("mounts_agent_ns"), k.get("agent_fds")))
    cells = [[str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    lines = ["| " + " | ".join(v.ljust(widths[i]) for i, v in enumerate(r)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=int, default=TARGETS["sandboxes"])
    ap.add_argument("--batch", type=int, default=500, help="sandboxes per job")
    ap.add_argument("--checkpoints", type=lambda s: [int(x) for x in s.split(",")], default=[1000, 2500, 5000, 10000])
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--max-sandboxes", type=int, default=0, help="CORRAL_NODE_MAX_SANDBOXES (0: the agent's default)")
    ap.add_argument("--cpu-overcommit", type=float, default=0.0,
                    help="the nodes' cpu overcommit (0: theirs)")
    ap.add_argument("--exec-samples", type=int, default=40)
    ap.add_argument("--list-samples", type=int, default=5)
    ap.add_argument("--floor-samples", type=int, default=15, help="of the exec samples, also run by crun directly")
    ap.add_argument("--settle-s", type=float, default=3.0)
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--heartbeat-timeout", type=float, default=10.0)
    ap.add_argument("--batch-timeout-s", type=float, default=180.0)
    ap.add_argument("--ramp-minutes", type=float, default=30.0, help="stop creating after this long (a shared host)")
    ap.add_argument("--teardown-timeout-s", type=float, default=1200.0)
    ap.add_argument("--base-port", type=int, default=24600)
    ap.add_argument("--redis-port", type=int, default=24750)
    ap.add_argument("--amqp-port", type=int, default=24751)
    ap.add_argument("--no-raise-pid-max", action="store_true", help="keep kernel.pid_max as it is")
    ap.add_argument("--keep-state", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the node-agents run crun")
    started = time.time()
    tmp_root = tempfile.mkdtemp(prefix="corral-density-")
    state = os.path.join(tmp_root, "state")
    env = node_env(args)
    result: dict = {
        "benchmark": "density",
        "command": " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], os.getcwd()), *sys.argv[1:]]),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {"nproc": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                 "mem_total_mib": meminfo()["MemTotal"] // 1024},
        "params": {**vars(args), "size": SIZE, "node_env": env}, "targets": TARGETS, "checkpoints": [],
    }
    old_pid_max = sysctl("kernel.pid_max")
    need = pids_needed(args)
    try:
        if not args.no_raise_pid_max and int(old_pid_max or 0) < need:
            set_sysctl("kernel.pid_max", str(need))
            result["host_changes"] = {"kernel.pid_max": [old_pid_max, str(need)]}
        print(f"starting platform ({args.nodes} nodes) in {state} with {env} ...", file=sys.stderr)
        t = time.perf_counter()
        info = platform_up(state, args, env)
        result["platform_up_s"] = round(time.perf_counter() - t, 2)
        asyncio.run(run(args, info["api"], info["api_key"], state, info["redis_url"], result))
    finally:
        t = time.perf_counter()
        platform_down(state)
        result["platform_down_s"] = round(time.perf_counter() - t, 1)
        result["leftovers_after_down"] = leftovers(state, result.get("_ids", []))
        if result.get("host_changes"):
            set_sysctl("kernel.pid_max", old_pid_max)
        if args.keep_state:
            print(f"state kept in {state}", file=sys.stderr)
        else:
            shutil.rmtree(tmp_root, ignore_errors=True)
    base_rss = (result.get("baseline") or {}).get("agent_rss_mib")
    for c in result["checkpoints"]:  # what the agents grew by, per sandbox
        if base_rss is not None:
            c["agent_rss_kib_per_sandbox"] = round((c["agent_rss_mib"] - base_rss) * 1024 / max(c["sandboxes"], 1), 2)
    result.pop("_jobs", None)
    result.pop("_ids", None)
    result["total_s"] = round(time.time() - started, 1)
    last = result["checkpoints"][-1] if result["checkpoints"] else {}
    result["verdict"] = {
        "reached": result.get("reached"), "target": args.target,
        "sandboxes_ok": (result.get("reached") or 0) >= TARGETS["sandboxes"],
        "host_mib_per_sandbox_ok": bool(last) and last["host_mib_per_sandbox"] <= TARGETS["host_mib_per_sandbox"],
        "exec_p50_ok": bool(last) and (last["exec"].get("p50") or 1e9) <= TARGETS["exec_p50_ms"],
        "limit": (result.get("stopped") or {}).get("limit", "target reached"),
    }
    print()
    print(table(result))
    print(json.dumps(result["verdict"]))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
