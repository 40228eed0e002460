#!/usr/bin/env python3
"""Burst benchmark: one job asking for N sandboxes at once, two competing jobs (weights 1:3), and
the same burst with a node-agent SIGKILLed half way; the raw crun creation rate as the floor.

    python bench/burst.py --n 2000 --nodes 2 --json bench/results/burst.json
    python bench/burst.py --n 1000 --phases single,fair,kill,floor

Brings its own platform up (scripts/corral_platform.py through bench/faults.py's Platform: its
own Redis and RabbitMQ, a private capacity registry, --base-port 24400) and takes it down at the
end, also on Ctrl-C or a failure (``corral_platform.py down`` deletes whatever sandboxes are
left). Root: the floor drives crun directly (bench/sandbox_lifecycle.py's floor).

Sandboxes: busybox, idle init, the default spec (its limits: a core, 256 MiB, 1 GiB of disk, 512
tasks; its requests what an idle sandbox uses), timeout 1 h; the nodes run with their default
settings. --memory-mb/--cpu/--disk-mb/--pids-limit and the overcommit options set them instead.
Timings come from the platform's own ``sandbox.scheduled`` / ``sandbox.running`` events (a
private auto-delete queue on the topic exchange; each event carries its ``at``), so nothing is
polled per sandbox:

  time to all running   job POST -> the N-th distinct sandbox.running
  admission rate        N / time to all running (sandboxes reaching running per second);
                        ``steady``: the 10%..90% running span
  queue wait            job POST -> sandbox.scheduled (placed on a node), p50 / p99
  shares (fair)         admissions (sandbox.scheduled) of each job in consecutive windows of
                        --share-window admissions while both jobs still had pending work,
                        against weight / sum of weights
  kill                  at N/2 admitted node-1's agent gets SIGKILL (its process group) and is
                        started again with the same command line and environment. Then:
                        lost = a requested sandbox not running at the end (by state);
                        duplicated = a job slot with two records, a sandbox on two nodes, or two
                        init processes for one id; orphaned = a crun container, cgroup, bundle
                        dir, mount or loop device on a node that no live record of that node
                        names (--grace s to settle), and the same census after the job's delete
  storm                 one job of N idle sandboxes, all running; then each is told (one exec
                        per sandbox, sent ahead) to wake at the same second and allocate
                        toward its memory limit (128 MiB held, 192 at
                        the last doubling, of 256) while spinning a core, for
                        --storm-s. Meanwhile a neighbour sandbox whose requests are its limits
                        (64 MiB, within them) is exec'd every second, and a probe sandbox is
                        created at the storm's start (does the node stop admitting? its state
                        and waiting reason). Reported: OOM kills (per-sandbox and at the
                        nodes' caps), CFS throttling, the neighbour's exec latencies, whether
                        every platform process (run/*.pid: api, scheduler, agents, Redis,
                        RabbitMQ, memory-manager) is the same process after, and how many of
                        the N sandboxes answer an exec once it has passed
  floor                 ``crun run --detach`` of a busybox bundle, --floor-n at
                        --floor-concurrency (sandbox_lifecycle's floor, same run)
"""

import argparse
import asyncio
import collections
import contextlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from faults import Platform  # noqa: E402 - the platform up/down and agent kill/restart faults.py uses
from sandbox_lifecycle import pct, pool_hits, pools_full, run_floor  # noqa: E402 - the same raw crun floor

PHASES = ("single", "fair", "kill", "storm", "floor")
LIVE = {"scheduled", "starting", "running", "paused"}
TERMINAL = {"terminated", "failed"}
CGROUP_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct", "freezer")
SANDBOX_ID = re.compile(r"^(job-[0-9a-f]+-\d+|sb-[0-9a-z]+)$")


def summary_s(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(pct(values, 50), 3), "p90": round(pct(values, 90), 3),
            "p99": round(pct(values, 99), 3), "max": round(max(values), 3)}


# ------------------------------------------------------------------------ host census

def host_census(state: Path, jobs: tuple[str, ...]) -> dict[str, dict[str, set[str]]]:
    """node -> kind -> the ids of the sandboxes of ``jobs`` that kind of thing exists for on the
    host. Only theirs: cgroup paths (/corral/<node>/<id>) are shared with any other platform on
    the host that also names its nodes node-1, node-2..."""
    ours = tuple(f"{job}-" for job in jobs)
    found: dict[str, dict[str, set[str]]] = {}
    loops = subprocess.run(["losetup", "-J", "-l"], capture_output=True, text=True).stdout
    backing = [d.get("back-file") or "" for d in (json.loads(loops)["loopdevices"] if loops.strip() else [])]
    for node_dir in sorted((state / "nodes").glob("node-*")):
        node = node_dir.name
        kinds: dict[str, set[str]] = collections.defaultdict(set)
        crun_root = node_dir / "crun"
        if crun_root.is_dir():
            out = subprocess.run(["crun", "--root", str(crun_root), "list", "-q"], capture_output=True, text=True)
            kinds["crun"] = {x.strip() for x in out.stdout.splitlines() if SANDBOX_ID.match(x.strip())}
        for controller in CGROUP_CONTROLLERS:
            base = Path(f"/sys/fs/cgroup/{controller}/corral/{node}")
            if base.is_dir():
                kinds["cgroup"] |= {p.name for p in base.iterdir() if p.is_dir() and SANDBOX_ID.match(p.name)}
        sb_dir = node_dir / "sandboxes"
        if sb_dir.is_dir():
            kinds["dir"] = {p.name for p in sb_dir.iterdir() if SANDBOX_ID.match(p.name)}
        prefix = f"{sb_dir}/"
        pid_file = state / "run" / f"{node}.pid"
        mountinfo = Path(f"/proc/{pid_file.read_text().strip()}/mountinfo") if pid_file.exists() else None
        try:
            lines = mountinfo.read_text().splitlines() if mountinfo else []
        except OSError:  # the agent is gone: its mount namespace with it
            lines = []
        for line in lines:
            point = line.split()[4]
            if point.startswith(prefix):
                sid = point[len(prefix):].split("/", 1)[0]
                if SANDBOX_ID.match(sid):
                    kinds["mount"].add(sid)
        for path in backing:
            if path.startswith(prefix):
                sid = path[len(prefix):].split("/", 1)[0]
                if SANDBOX_ID.match(sid):
                    kinds["loop"].add(sid)
        found[node] = {kind: {sid for sid in ids if sid.startswith(ours)} for kind, ids in kinds.items()}
    return found


def platform_processes(state: Path) -> dict[str, int]:
    """The platform's processes by name (run/*.pid), those alive: the same pid after a storm
    means it was never killed or restarted."""
    found = {}
    servers = state / "servers"
    files = [*sorted((state / "run").glob("*.pid")), servers / "redis" / "redis.pid",
             servers / "rabbitmq" / "rabbitmq.pid", servers / "postgres" / "data" / "postmaster.pid"]
    for pid_file in files:
        try:
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError):
            continue
        found[pid_file.parent.name if pid_file.parent.name != "run" else pid_file.stem] = pid
    return found


def cgroup_counters(state: Path) -> dict[str, int]:
    """OOM kills inside sandboxes' memory cgroups (v1 ``oom_kill``), the times the nodes' own
    memory cgroups hit their caps (``memory.failcnt``), and CFS periods the sandboxes were
    throttled in, summed over every node of this platform."""
    out = {"sandbox_oom_kills": 0, "node_failcnt": 0, "throttled_periods": 0, "node_peak_mb": {}, "cpu_s": 0.0}
    for node in (p.name for p in (state / "nodes").iterdir()) if (state / "nodes").exists() else ():
        memory = Path(f"/sys/fs/cgroup/memory/corral/{node}")
        if memory.exists():
            out["node_failcnt"] += int((memory / "memory.failcnt").read_text() or 0)
            out["node_peak_mb"][node] = int((memory / "memory.max_usage_in_bytes").read_text()) >> 20
            for sandbox in (d for d in memory.iterdir() if d.is_dir()):
                with contextlib.suppress(OSError):
                    fields = dict(line.split() for line in (sandbox / "memory.oom_control").read_text().splitlines())
                    out["sandbox_oom_kills"] += int(fields.get("oom_kill", 0))
        # (cpu and cpuacct are one hierarchy on some hosts, two on others)
        cpu = next((p for c in ("cpu", "cpu,cpuacct") if (p := Path(f"/sys/fs/cgroup/{c}/corral/{node}")).exists()), None)
        acct = next((p for c in ("cpuacct", "cpu,cpuacct")
                     if (p := Path(f"/sys/fs/cgroup/{c}/corral/{node}") / "cpuacct.usage").exists()), None)
        if acct is not None:
            out["cpu_s"] += int(acct.read_text()) / 1e9
        for sandbox in (d for d in cpu.iterdir() if d.is_dir()) if cpu is not None else ():
            with contextlib.suppress(OSError):
                fields = dict(line.split() for line in (sandbox / "cpu.stat").read_text().splitlines())
                out["throttled_periods"] += int(fields.get("nr_throttled", 0))
    return out


def init_processes(jobs: tuple[str, ...]) -> collections.Counter:
    """(node, sandbox id) -> processes that are PID 1 of a pid namespace in that sandbox's cgroup."""
    seen: collections.Counter = collections.Counter()
    pattern = re.compile(r":memory:/corral/(node-\d+)/([^/\n]+)")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
            nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
            if len(nspid) < 2 or nspid[-1] != "1":
                continue
            got = pattern.search((proc / "cgroup").read_text())
        except OSError:
            continue
        if got and got.group(2).startswith(tuple(f"{job}-" for job in jobs)):
            seen[(got.group(1), got.group(2))] += 1
    return seen


# ------------------------------------------------------------------------------ bench

class Burst:
    def __init__(self, plat: Platform, args: argparse.Namespace):
        self.plat, self.args = plat, args
        self.records_running_at: dict[str, float] = {}  # job -> when its records first showed all running
        self.api = httpx.AsyncClient(base_url=plat.info["api"], timeout=httpx.Timeout(120, connect=5),
                                     headers={"authorization": f"Bearer {plat.info['api_key']}"},
                                     limits=httpx.Limits(max_connections=16))
        limits = {"memory_mb": args.memory_mb, "cpu": args.cpu, "disk_mb": args.disk_mb, "pids_limit": args.pids_limit}
        self.spec = {"environment": "busybox", "timeout_s": 3600, **{k: v for k, v in limits.items() if v is not None}}
        # sandbox id -> state -> the event's time (epoch s), first one seen
        self.events: dict[str, dict[str, float]] = collections.defaultdict(dict)
        self.statuses: collections.Counter = collections.Counter()  # every answer the api gave us
        self.bus = None

    async def start(self) -> None:
        from corral_common.amqp import EventBus
        from corral_common.contracts.events import SandboxStateChanged

        self.bus = await EventBus(self.plat.info["amqp_url"]).connect()

        async def on_event(event: SandboxStateChanged) -> None:
            self.events[event.sandbox_id].setdefault(event.state.value, event.at.timestamp())

        await self.bus.subscribe(["sandbox.scheduled", "sandbox.running", "sandbox.failed", "sandbox.terminated"],
                                 SandboxStateChanged, on_event)

    async def close(self) -> None:
        await self.api.aclose()
        if self.bus is not None:
            await self.bus.close()

    async def call(self, method: str, path: str, **kw) -> httpx.Response:
        r = await self.api.request(method, path, **kw)
        self.statuses[r.status_code] += 1
        if r.status_code >= 500:
            print(f"  {method} {path} -> {r.status_code}: {r.text[:300]}", file=sys.stderr)
        return r

    # -- jobs

    async def submit(self, count: int, weight: float = 1.0) -> tuple[str, float]:
        t = time.time()
        r = await self.call("POST", "/v1/jobs", json={"spec": self.spec, "count": count, "weight": weight})
        r.raise_for_status()
        return r.json()["id"], t

    async def records(self, job_id: str) -> list[dict]:
        r = await self.call("GET", "/v1/sandboxes", params={"label": f"job={job_id}"})
        r.raise_for_status()
        return r.json()["items"]

    def admitted(self, job_id: str) -> int:
        return sum(1 for sid, ev in list(self.events.items()) if sid.startswith(f"{job_id}-") and "scheduled" in ev)

    def running(self, job_id: str) -> int:
        return sum(1 for sid, ev in list(self.events.items()) if sid.startswith(f"{job_id}-") and "running" in ev)

    async def wait_running(self, job_ids: dict[str, int], deadline_s: float) -> dict[str, dict]:
        """Until every job's sandboxes are all running (by events, confirmed by the records),
        or the deadline; returns each job's records' states. The records are also read every
        2 s meanwhile: the ``running`` event is unconfirmed (the api's waiters re-read Redis
        each second), so the last ones an agent sends before a SIGKILL can be lost with its
        socket; ``all_running_by_records_s`` in the timings then bounds the time instead."""
        deadline = time.monotonic() + deadline_s
        checked = time.monotonic()
        while True:
            done = all(self.running(j) >= n for j, n in job_ids.items())
            if done or time.monotonic() > deadline:
                break
            if time.monotonic() - checked >= 2.0:
                checked = time.monotonic()
                if await self._all_running_by_records(job_ids):
                    break
            await asyncio.sleep(0.25)
        while True:  # the records are the truth (a re-adopted sandbox sends no second event)
            states = {j: collections.Counter(r["state"] for r in await self.records(j)) for j in job_ids}
            if all(s.get("running", 0) >= job_ids[j] for j, s in states.items()):
                for j in job_ids:
                    self.records_running_at.setdefault(j, time.time())
                return {j: dict(s) for j, s in states.items()}
            if time.monotonic() > deadline:
                return {j: dict(s) for j, s in states.items()}
            await asyncio.sleep(1.0)

    async def _all_running_by_records(self, job_ids: dict[str, int]) -> bool:
        for j, n in job_ids.items():
            if sum(r["state"] == "running" for r in await self.records(j)) < n:
                return False
            self.records_running_at.setdefault(j, time.time())
        return True

    def timings(self, job_id: str, posted: float, count: int) -> dict:
        mine = {sid: ev for sid, ev in self.events.items() if sid.startswith(f"{job_id}-")}
        sched = sorted(ev["scheduled"] - posted for ev in mine.values() if "scheduled" in ev)
        run = sorted(ev["running"] - posted for ev in mine.values() if "running" in ev)
        out = {"count": count, "admitted_events": len(sched), "running_events": len(run),
               "queue_wait_s": summary_s(sched), "to_running_s": summary_s(run)}
        if job_id in self.records_running_at and len(run) < count:
            out["all_running_by_records_s"] = round(self.records_running_at[job_id] - posted, 2)
        if len(run) >= count:
            all_running = run[count - 1]
            out["all_running_s"] = round(all_running, 2)
            out["admission_rate"] = round(count / all_running, 1)
            lo, hi = run[int(count * 0.1)], run[max(int(count * 0.9) - 1, 0)]
            if hi > lo:
                out["steady_rate"] = round((int(count * 0.9) - int(count * 0.1)) / (hi - lo), 1)
        return out

    async def delete_and_census(self, job_ids: list[str]) -> dict:
        """Delete the jobs, wait for every sandbox to end, then what is left on the hosts."""
        t = time.monotonic()
        for job_id in job_ids:
            (await self.call("DELETE", f"/v1/jobs/{job_id}")).raise_for_status()
        deadline = t + self.args.deadline
        while time.monotonic() < deadline:
            live = [r for j in job_ids for r in await self.records(j) if r["state"] not in TERMINAL]
            if not live:
                break
            await asyncio.sleep(1.0)
        ended_s = round(time.monotonic() - t, 1)
        leftovers = {}
        settle = time.monotonic() + self.args.grace
        while True:
            census = await asyncio.to_thread(host_census, self.plat.state, tuple(job_ids))
            leftovers = {f"{node}:{kind}": len(ids) for node, kinds in census.items() for kind, ids in kinds.items() if ids}
            if not leftovers or time.monotonic() > settle:
                break
            await asyncio.sleep(1.0)
        return {"delete_to_all_ended_s": ended_s, "live_after_delete": len(live), "leftovers": leftovers,
                "leftover_ids": sorted({sid for kinds in census.values() for ids in kinds.values() for sid in ids})[:10]}

    # -- phases

    async def single(self) -> dict:
        n = self.args.n
        print(f"single: one job of {n} ...", file=sys.stderr)
        job_id, posted = await self.submit(n)
        states = (await self.wait_running({job_id: n}, self.args.deadline))[job_id]
        out = {"job": job_id, **self.timings(job_id, posted, n), "states": states}
        out["cleanup"] = await self.delete_and_census([job_id])
        return out

    async def fair(self) -> dict:
        n_each = self.args.n // 2
        weights = (1.0, 3.0)
        print(f"fair: two jobs of {n_each}, weights {weights[0]:g}:{weights[1]:g} ...", file=sys.stderr)
        (a, ta), (b, tb) = await asyncio.gather(*(self.submit(n_each, w) for w in weights))
        states = await self.wait_running({a: n_each, b: n_each}, self.args.deadline)
        out = {"jobs": {a: {"weight": weights[0], **self.timings(a, ta, n_each), "states": states[a]},
                        b: {"weight": weights[1], **self.timings(b, tb, n_each), "states": states[b]}}}
        out["shares"] = self.shares(a, b, weights)
        out["cleanup"] = await self.delete_and_census([a, b])
        return out

    def shares(self, a: str, b: str, weights: tuple[float, float]) -> dict:
        """Admissions of each job in windows of --share-window admissions, from the first
        admission to the last one made while both jobs still had sandboxes to admit."""
        admissions = sorted((ev["scheduled"], sid.rsplit("-", 1)[0]) for sid, ev in self.events.items()
                            if "scheduled" in ev and sid.rsplit("-", 1)[0] in (a, b))
        last = {job: max(t for t, j in admissions if j == job) for job in (a, b) if any(j == job for _, j in admissions)}
        if len(last) < 2:
            return {"error": "one job made no admission"}
        both_until = min(last.values())
        both = [j for t, j in admissions if t <= both_until]
        w = self.args.share_window
        windows = [both[i:i + w] for i in range(0, len(both) - w + 1, w)]
        expected_b = weights[1] / sum(weights)
        per_window = [sum(1 for j in win if j == b) / len(win) for win in windows]
        overall_b = sum(1 for j in both if j == b) / len(both)
        return {"admissions_while_both_queued": len(both), "window": w, "windows": len(windows),
                "expected": {a: round(1 - expected_b, 3), b: round(expected_b, 3)},
                "observed": {a: round(1 - overall_b, 3), b: round(overall_b, 3)},
                "window_share_heavy": {"min": round(min(per_window), 3) if per_window else None,
                                       "max": round(max(per_window), 3) if per_window else None,
                                       "mean": round(statistics.fmean(per_window), 3) if per_window else None},
                "max_window_deviation": round(max((abs(s - expected_b) for s in per_window), default=0), 3)}

    async def kill(self) -> dict:
        n = self.args.n
        print(f"kill: one job of {n}, node-1's agent SIGKILLed at {n // 2} admitted ...", file=sys.stderr)
        job_id, posted = await self.submit(n)
        deadline = time.monotonic() + self.args.deadline
        while self.admitted(job_id) < n // 2 and time.monotonic() < deadline:  # noqa: ASYNC110 - events fill it
            await asyncio.sleep(0.02)
        at_kill = {"admitted": self.admitted(job_id), "running": self.running(job_id),
                   "at_s": round(time.time() - posted, 2)}
        t = time.monotonic()
        spawn = await asyncio.to_thread(self.plat.stop, "node-agent")  # SIGKILL to its process group
        await asyncio.to_thread(self.plat.start, "node-agent", spawn)
        agent_url = f"http://127.0.0.1:{self.args.base_port + 101}"
        async with httpx.AsyncClient(timeout=1) as probe:
            while time.monotonic() < deadline:
                try:
                    if (await probe.get(f"{agent_url}/healthz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        at_kill["agent_back_s"] = round(time.monotonic() - t, 2)
        states = (await self.wait_running({job_id: n}, max(1.0, deadline - time.monotonic())))[job_id]
        out = {"job": job_id, "at_kill": at_kill, **self.timings(job_id, posted, n), "states": states}
        out.update(await self.integrity(job_id, n))
        out["cleanup"] = await self.delete_and_census([job_id])
        return out

    async def storm(self) -> dict:
        n, storm_s = self.args.n, self.args.storm_s
        print(f"storm: one job of {n}, then all wake at once for {storm_s:g} s ...", file=sys.stderr)
        job_id, posted = await self.submit(n)
        states = (await self.wait_running({job_id: n}, self.args.deadline))[job_id]
        ids = [r["id"] for r in await self.records(job_id) if r["state"] == "running"]
        neighbour = await self.call("POST", "/v1/sandboxes", params={"wait_for": "running", "timeout": 60}, json={
            "environment": "busybox", "timeout_s": 3600, "memory_mb": 64,
            "requests": {"memory_mb": 64, "cpu": 0.1}, "labels": {"bench": "storm-neighbour"}})
        neighbour.raise_for_status()
        neighbour_id = neighbour.json()["id"]
        platform_pids = platform_processes(self.plat.state)
        # Every sandbox gets its wake-up ahead (an exec that backgrounds a sleep to the same
        # epoch second), so the storm starts together however long the execs take to send.
        wake_at = int(time.time() + 10 + n / 40)
        hog = (f"sleep $(({wake_at} - $(date +%s)))\n"
               f"timeout {storm_s:g} awk 'BEGIN {{ s = \"x\"; while (length(s) < 134217728) s = s s; "
               "while (1) {} }'\n")
        arm_cmd = f"cat > /tmp/storm.sh <<'EOF'\n{hog}EOF\nsh /tmp/storm.sh >/dev/null 2>&1 &"
        sem = asyncio.Semaphore(16)

        async def arm(sid: str) -> int:
            async with sem:
                r = await self.call("POST", f"/v1/sandboxes/{sid}/exec",
                                    json={"cmd": arm_cmd, "timeout_s": 30})
                return r.status_code
        before = await asyncio.to_thread(cgroup_counters, self.plat.state)
        t = time.monotonic()
        armed = collections.Counter(await asyncio.gather(*(arm(sid) for sid in ids)))
        armed_s = round(time.monotonic() - t, 1)
        if time.time() >= wake_at:
            print(f"  the wake-ups took {armed_s} s to send: some woke late", file=sys.stderr)
        await asyncio.sleep(max(0.0, wake_at - time.time()))
        probe = (await self.call("POST", "/v1/sandboxes", json={"environment": "busybox", "timeout_s": 600,
                                                                 "labels": {"bench": "storm-probe"}})).json()
        pings: list[float | None] = []
        probe_seen: list[tuple[float, str, str | None]] = []
        end = time.monotonic() + storm_s + 10
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                r = await self.api.post(f"/v1/sandboxes/{neighbour_id}/exec",
                                        json={"cmd": "echo alive", "timeout_s": 10}, timeout=15)
                ok = r.status_code == 200 and r.json().get("stdout") == "alive\n"
            except httpx.HTTPError:
                ok = False
            pings.append(round((time.monotonic() - t0) * 1000, 1) if ok else None)
            if "id" in probe:
                rec = (await self.call("GET", f"/v1/sandboxes/{probe['id']}")).json()
                probe_seen.append((round(time.time() - wake_at, 1), rec.get("state"), rec.get("reason")))
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
        kills = await asyncio.to_thread(cgroup_counters, self.plat.state)

        async def answers(sid: str) -> str:
            async with sem:
                try:
                    r = await self.api.post(f"/v1/sandboxes/{sid}/exec", json={"cmd": "echo alive", "timeout_s": 20})
                except httpx.HTTPError as exc:
                    return type(exc).__name__
                if r.status_code != 200:
                    return f"{r.status_code} {r.text[:120]}"
                return "ok" if r.json().get("stdout") == "alive\n" else f"exit {r.json().get('exit_code')}"
        replies = collections.Counter(await asyncio.gather(*(answers(sid) for sid in ids)))
        answered = replies.pop("ok", 0)
        alive = platform_processes(self.plat.state)
        ok_pings = [p for p in pings if p is not None]
        out = {"job": job_id, **self.timings(job_id, posted, n), "states": states, "storm_s": storm_s,
               "wake_execs": dict(armed), "wake_execs_sent_s": armed_s,
               "oom_kills_in_sandboxes": kills["sandbox_oom_kills"] - before["sandbox_oom_kills"],
               "node_cap_hits": kills["node_failcnt"] - before["node_failcnt"],
               "cpu_throttled_periods": kills["throttled_periods"] - before["throttled_periods"],
               "sandbox_cpu_s": round(kills["cpu_s"] - before["cpu_s"], 1), "node_peak_mb": kills["node_peak_mb"],
               "neighbour": {"pings": len(pings), "answered": len(ok_pings),
                             "p50_ms": statistics.median(ok_pings) if ok_pings else None,
                             "max_ms": max(ok_pings) if ok_pings else None},
               "probe": {"id": probe.get("id"), "seen": probe_seen[::3] + probe_seen[-1:]},
               "answered_after": answered, "of": len(ids), "not_answered": dict(replies.most_common(5)),
               "platform_processes": {name: ("same" if alive.get(name) == pid else f"{pid} -> {alive.get(name)}")
                                      for name, pid in platform_pids.items()}}
        for sid in [neighbour_id, probe.get("id")]:
            if sid:
                await self.call("DELETE", f"/v1/sandboxes/{sid}")
        out["cleanup"] = await self.delete_and_census([job_id])
        return out

    async def integrity(self, job_id: str, n: int) -> dict:
        """lost / duplicated / orphaned once the job settled (orphans get --grace s to go)."""
        job = (await self.call("GET", f"/v1/jobs/{job_id}")).json()
        settle = time.monotonic() + self.args.grace
        while True:
            records = await self.records(job_id)
            census = await asyncio.to_thread(host_census, self.plat.state, (job_id,))
            inits = await asyncio.to_thread(init_processes, (job_id,))
            by_id = {r["id"]: r for r in records}
            live_on = {(r["node_id"], r["id"]) for r in records if r["state"] in LIVE}
            orphans = sorted({f"{node}:{kind}:{sid}" for node, kinds in census.items() for kind, ids in kinds.items()
                              for sid in ids if (node, sid) not in live_on})
            if not orphans or time.monotonic() > settle:
                break
            await asyncio.sleep(1.0)
        lost = {sid: r["state"] for sid, r in by_id.items() if r["state"] != "running"}
        missing = n - len(by_id)  # a slot with no record at all
        on_nodes = collections.Counter(sid for kinds in census.values() for sid in kinds.get("crun", ()))
        dup = sorted({f"two records for slot {sid}" for sid, c in collections.Counter(r["id"] for r in records).items() if c > 1}
                     | {f"{sid} on {c} nodes" for sid, c in on_nodes.items() if c > 1}
                     | {f"{sid}: {c} inits on {node}" for (node, sid), c in inits.items() if c > 1})
        return {"lost": len(lost) + max(missing, 0), "lost_by_state": dict(collections.Counter(lost.values())),
                "lost_ids": sorted(lost)[:10], "records": len(by_id), "job_admitted": job.get("admitted"),
                "job_pending": job.get("pending"), "duplicated": len(dup), "duplicates": dup[:10],
                "orphaned": len({o.rsplit(":", 1)[1] for o in orphans}), "orphans": orphans[:10]}

    async def fill_pools(self) -> float:
        """--warm-pool: one untimed job of the burst's size teaches every node the shape (a node
        pools only what it was asked for), then its pools fill; what a trainer's first step does."""
        n = self.args.n
        print(f"warm pool: an untimed job of {n}, then full pools ...", file=sys.stderr)
        job_id, _ = await self.submit(n)
        await self.wait_running({job_id: n}, self.args.deadline)
        await self.delete_and_census([job_id])
        self.events.clear()
        t = time.monotonic()
        await pools_full(self.node_urls(), self.args.warm_pool, timeout_s=self.args.deadline)
        return round(time.monotonic() - t, 1)

    def node_urls(self) -> list[str]:
        return [u for name, u in self.plat.info["urls"].items() if name.startswith("node-")]

    async def run(self, phases: list[str]) -> dict:
        result: dict = {}
        for phase in phases:
            if phase == "floor":
                continue
            if self.args.warm_pool:
                result.setdefault("pool_fill_s", []).append(await self.fill_pools())
                hits = await pool_hits(self.node_urls())
            t = time.monotonic()
            result[phase] = await getattr(self, phase)()
            if self.args.warm_pool:
                # (counted after the phase's deletes: its creates only)
                result[phase]["from_warm_pool"] = await pool_hits(self.node_urls()) - hits
            result[phase]["phase_s"] = round(time.monotonic() - t, 1)
            self.events.clear()
        result["api_statuses"] = {str(k): v for k, v in sorted(self.statuses.items())}
        return result


def log_errors(state: Path) -> dict[str, int]:
    """Lines at level error (or tracebacks) per service log: a burst must not make any."""
    out = {}
    for log in sorted((state / "logs").glob("*.log")):
        text = log.read_text(errors="replace")
        count = len(re.findall(r'"level": ?"(error|critical)"|^Traceback', text, flags=re.M))
        if count:
            out[log.stem] = count
    return out


# ------------------------------------------------------------------------------ report

def table(result: dict) -> str:
    floor = result.get("floor", {}).get("concurrent", {}).get("runs_per_s")
    rows = [("phase / job", "all running (s)", "rate (/s)", "steady (/s)", "queue wait p50 / p99 (s)",
             "rate / raw", "notes")]

    def row(name: str, t: dict, notes: str = "") -> None:
        rate = t.get("admission_rate")
        if "all_running_s" in t:
            all_running = f"{t['all_running_s']:g}"
        elif "all_running_by_records_s" in t:  # some running events lost (unconfirmed), the records say
            all_running = f"<= {t['all_running_by_records_s']:g} ({t['running_events']}/{t['count']} events)"
        else:
            all_running = f"- ({t['running_events']}/{t['count']})"
        rows.append((name, all_running,
                     f"{rate:g}" if rate else "-", f"{t['steady_rate']:g}" if t.get("steady_rate") else "-",
                     f"{t['queue_wait_s'].get('p50', '-')} / {t['queue_wait_s'].get('p99', '-')}",
                     f"{rate / floor:.2f}×" if rate and floor else "-", notes))

    if "single" in result:
        t = result["single"]
        row(f"single, N={t['count']}", t, f"{t['from_warm_pool']} from warm pools" if "from_warm_pool" in t else "")
    if "fair" in result:
        sh = result["fair"]["shares"]
        for job_id, t in result["fair"]["jobs"].items():
            notes = ""
            if "observed" in sh:
                notes = (f"share {sh['observed'][job_id]:.3f} vs {sh['expected'][job_id]:.3f} over "
                         f"{sh['admissions_while_both_queued']} admissions")
            row(f"fair, weight {t['weight']:g}, N={t['count']}", t, notes)
    if "kill" in result:
        k = result["kill"]
        row(f"kill node-1 at {k['at_kill']['admitted']}, N={k['count']}", k,
            f"lost {k['lost']}, duplicated {k['duplicated']}, orphaned {k['orphaned']}; agent back in "
            f"{k['at_kill']['agent_back_s']} s")
    if "storm" in result:
        st = result["storm"]
        nb = st["neighbour"]
        same = sum(v == "same" for v in st["platform_processes"].values())
        row(f"storm, N={st['count']} (then {st['storm_s']:g} s awake)", st,
            f"sandbox cpu {st['sandbox_cpu_s']} s, node peaks {st['node_peak_mb']} MiB, "
            f"OOM kills {st['oom_kills_in_sandboxes']} (node caps hit {st['node_cap_hits']}), throttled "
            f"{st['cpu_throttled_periods']} periods; neighbour {nb['answered']}/{nb['pings']} (p50 {nb['p50_ms']} ms, "
            f"max {nb['max_ms']} ms); {st['answered_after']}/{st['of']} answer after; platform processes "
            f"{same}/{len(st['platform_processes'])} the same")
    if floor:
        f = result["floor"]["concurrent"]
        rows.append((f"raw crun run -d, C={f['concurrency']}", "-", f"{floor:g}", "-", "-", "1.00×",
                     f"n={f['run']['n']}, run p50 {f['run']['p50']} ms"))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(v).ljust(widths[i]) for i, v in enumerate(r)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="sandboxes per burst (the fair phase splits them over two jobs)")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"in order, from {','.join(PHASES)}")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--share-window", type=int, default=40, help="admissions per window of the shares")
    ap.add_argument("--deadline", type=float, default=300, help="longest wait for a burst to run, or to end (s)")
    ap.add_argument("--grace", type=float, default=30, help="how long a host artifact may outlive its record (s)")
    ap.add_argument("--storm-s", type=float, default=30, help="how long the storm's sandboxes stay awake")
    ap.add_argument("--floor-n", type=int, default=300, help="raw crun containers of the floor")
    ap.add_argument("--floor-concurrency", type=int, default=8)
    ap.add_argument("--memory-mb", type=int, default=None, help="memory limit (default: the api's)")
    ap.add_argument("--cpu", type=float, default=None, help="cpu limit (default: the api's)")
    ap.add_argument("--disk-mb", type=int, default=None, help="disk limit (default: the api's)")
    ap.add_argument("--pids-limit", type=int, default=None, help="pids limit (default: the api's)")
    ap.add_argument("--cpu-overcommit", type=float, default=None, help="the nodes' cpu overcommit (default: theirs)")
    ap.add_argument("--memory-overcommit", type=float, default=None, help="the nodes' memory overcommit (default: theirs)")
    ap.add_argument("--disk-preallocate", action="store_true",
                    help="let the nodes fallocate each sandbox's disk (N x disk_mb of real disk)")
    ap.add_argument("--warm-pool", type=int, default=0, metavar="N",
                    help="the node-agents keep N containers of the burst's shape started ahead "
                         "(CORRAL_NODE_WARM_POOL_SIZE); each phase starts with full pools")
    ap.add_argument("--base-port", type=int, default=24400)
    ap.add_argument("--redis-port", type=int, default=24450)
    ap.add_argument("--amqp-port", type=int, default=24460, help="takes this port and the next nine")
    ap.add_argument("--log-level", default="WARNING")
    ap.add_argument("--keep-state", action="store_true")
    ap.add_argument("--json", default=None, help="write all numbers here")
    args = ap.parse_args()
    phases = [p for p in args.phases.split(",") if p]
    if unknown := set(phases) - set(PHASES):
        ap.error(f"unknown phases {sorted(unknown)}")
    if os.geteuid() != 0:
        raise SystemExit("run as root: the platform runs real containers and the floor drives crun")
    args.signal = "KILL"  # faults.Platform.stop: the agent's process group gets SIGKILL

    host_mb = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal")) // 1024
    overcommit = args.memory_overcommit
    # The nodes' own settings (corral_platform.py passes its environment on to them): their
    # defaults, but for what the options set.
    os.environ.update({"CORRAL_NODE_DISK_PREALLOCATE": "true" if args.disk_preallocate else "false",
                       "CORRAL_NODE_WARM_POOL_SIZE": str(args.warm_pool), "CORRAL_LOG_LEVEL": args.log_level,
                       **({"CORRAL_NODE_MEMORY_OVERCOMMIT": str(overcommit)} if overcommit else {})})

    tmp_root = tempfile.mkdtemp(prefix="corral-bench-burst-")
    os.chmod(tmp_root, 0o711)  # noqa: S103 - sandboxes' own uids reach their roots below it
    state = Path(tmp_root) / "state"
    result: dict = {
        "benchmark": "burst",
        "command": " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], os.getcwd()), *sys.argv[1:]]),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {"nproc": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                 "mem_total_mb": host_mb},
        "params": {**{k: v for k, v in vars(args).items() if k not in ("json", "keep_state", "signal")},
                   "node_memory_overcommit": overcommit},
    }
    # Ctrl-C and a plain kill both unwind through the finally below (platform down).
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    plat = Platform(state, argparse.Namespace(**{**vars(args), "log_level": args.log_level}))
    started = time.time()
    try:
        print(f"starting platform ({args.nodes} nodes) in {state} ...", file=sys.stderr)
        plat.up()

        async def go() -> dict:
            bench = Burst(plat, args)
            try:
                await bench.start()
                return await bench.run(phases)
            finally:
                await bench.close()

        result.update(asyncio.run(go()))
        result["log_errors"] = log_errors(state)
        if "floor" in phases:
            print(f"floor: {args.floor_n} raw crun containers at concurrency {args.floor_concurrency} ...",
                  file=sys.stderr)
            t = time.monotonic()
            result["floor"] = run_floor(args.floor_n, args.floor_concurrency, tmp_root)
            result["floor"]["phase_s"] = round(time.monotonic() - t, 1)
    finally:
        plat.down()
        if args.keep_state:
            print(f"state kept in {state}", file=sys.stderr)
        else:
            shutil.rmtree(tmp_root, ignore_errors=True)
    result["total_s"] = round(time.time() - started, 1)
    text = table(result)
    result["table"] = text.splitlines()
    print(text)
    print(f"\napi answers {result.get('api_statuses')}; error lines in logs {result.get('log_errors')}; "
          f"total {result['total_s']} s")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
