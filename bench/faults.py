#!/usr/bin/env python3
"""Faults benchmark: restart Redis, RabbitMQ, the api, the scheduler and a node-agent one after
another under N running sandboxes and a job of M in flight; count what was lost, duplicated
and orphaned, and how long the platform took to serve again.

    python bench/faults.py --n 500 --m 1000 --json bench/results/faults.json
    python bench/faults.py --n 50 --m 100            # a 2-core machine

Brings its own platform up (scripts/corral_platform.py: its own Redis and RabbitMQ, real crun
containers, temp state dir, --base-port 24400) and takes it down at the end. Root.

- The N sandboxes live through every fault (timeout 1 h); the job's M live --job-timeout s
  each, so the job keeps admitting (fair share, capacity) while the faults happen.
- Each fault: stop the server or process, send --during creates while it is down, start it
  again (a process with the same command line and environment, as a supervisor would), then
  probe (create a sandbox, wait for running, exec in it) until one probe passes:
  recover_s = from the stop to that probe's success.
- Then, per fault: lost = those of the N that the faults before left (``left``) not found, not
  running, or whose exec fails;
  duplicated = a sandbox with a container on two nodes; orphaned = a container (crun, on a
  node) whose record is gone or ended or names another node, still there --grace s later;
  during = the outage's creates by answer (202 / 503 / refused ...), and those answered 202
  that never ran (lost).
- Lost sandboxes are replaced before the next fault (--no-replenish: not), so each fault
  starts from N; a job that a fault made disappear is counted lost with it, and a new one is
  put in flight.
- At the end the (last) job must complete: all M ended on their own (terminated, reason
  timeout); the rest are counted (failed, still pending, gone from Redis).
"""

import argparse
import asyncio
import collections
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from corral_platform import _alive, stop_process  # noqa: E402 - the platform's own process handling

SERVERS = str(ROOT / "scripts/servers.sh")
FAULTS = ("redis", "rabbitmq", "api", "scheduler", "node-agent")
LIVE = {"running", "paused"}
TERMINAL = {"terminated", "failed"}


# ------------------------------------------------------------------------- the platform

class Platform:
    def __init__(self, state: Path, args: argparse.Namespace):
        self.state, self.args = state, args
        self.info: dict = {}

    def up(self) -> None:
        env = dict(os.environ, CORRAL_NODE_CAPACITY_REGISTRY_DIR=str(self.state / "capacity"))
        cmd = [sys.executable, str(ROOT / "scripts/corral_platform.py"), "up", "--state-dir", str(self.state),
               "--nodes", str(self.args.nodes), "--base-port", str(self.args.base_port),
               "--redis-port", str(self.args.redis_port), "--amqp-port", str(self.args.amqp_port),
               "--log-level", "WARNING",
               *(["--cpu-overcommit", str(self.args.cpu_overcommit)] if self.args.cpu_overcommit else [])]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode:
            logs = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in (self.state / "logs").glob("*.log"))
            raise SystemExit(f"platform did not come up:\n{out.stderr[-3000:]}\n{logs}")
        self.info = json.loads(out.stdout.strip().splitlines()[-1])

    def down(self) -> None:
        subprocess.run([sys.executable, str(ROOT / "scripts/corral_platform.py"), "down", "--state-dir",
                        str(self.state)], capture_output=True)

    @property
    def servers(self) -> str:
        return str(self.state / "servers")

    # -- faults: stop, then start again

    def stop(self, fault: str) -> dict:
        """Stop what ``fault`` names; returns what start() needs to bring it back."""
        if fault == "redis":
            pid_file = Path(self.servers) / "redis" / "redis.pid"
            pid = int(pid_file.read_text())
            os.kill(pid, signal.SIGTERM)  # as a service manager stops it (with an AOF: fsynced first)
            wait_gone(pid)
            return {}
        if fault == "rabbitmq":
            subprocess.run([SERVERS, "stop-rabbitmq", self.servers], check=True, capture_output=True)
            return {}
        name = {"api": "api", "scheduler": "scheduler", "node-agent": "node-1"}[fault]
        pid = int((self.state / "run" / f"{name}.pid").read_text())
        spawn = {"name": name, "cmdline": Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1],
                 "environ": dict(item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                                 if b"=" in item),
                 "cwd": os.readlink(f"/proc/{pid}/cwd")}
        if self.args.signal == "KILL":
            os.killpg(pid, signal.SIGKILL)
            wait_gone(pid)
            (self.state / "run" / f"{name}.pid").unlink(missing_ok=True)
        else:
            stop_process(self.state, name, timeout=30)
        return spawn

    def start(self, fault: str, spawn: dict) -> None:
        if fault in ("redis", "rabbitmq"):
            subprocess.run([SERVERS, "start", self.servers, str(self.args.redis_port), str(self.args.amqp_port)],
                           check=True, capture_output=True)
            return
        log = open(self.state / "logs" / f"{spawn['name']}.log", "ab")
        proc = subprocess.Popen(spawn["cmdline"], env=spawn["environ"], cwd=spawn["cwd"], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        (self.state / "run" / f"{spawn['name']}.pid").write_text(str(proc.pid))

    # -- what runs where

    def containers(self) -> dict[str, set[str]]:
        """node id -> the sandbox ids crun has a container for on that node."""
        found = {}
        for node_dir in sorted((self.state / "nodes").glob("node-*")):
            crun_root = node_dir / "crun"
            ids: set[str] = set()
            if crun_root.is_dir():
                out = subprocess.run(["crun", "--root", str(crun_root), "list", "-q"], capture_output=True, text=True)
                ids = {line.strip() for line in out.stdout.splitlines() if line.strip().startswith(("sb-", "job-"))}
            found[node_dir.name] = ids
        return found


def wait_gone(pid: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


# ------------------------------------------------------------------------------- phases

class Bench:
    def __init__(self, plat: Platform, args: argparse.Namespace):
        self.plat, self.args = plat, args
        self.api = httpx.AsyncClient(base_url=plat.info["api"], timeout=httpx.Timeout(120, connect=5),
                                     headers={"authorization": f"Bearer {plat.info['api_key']}"},
                                     limits=httpx.Limits(max_connections=64))
        self.spec = {"environment": "busybox", "memory_mb": args.memory_mb, "cpu": args.cpu, "disk_mb": args.disk_mb,
                     "pids_limit": args.pids_limit}

    async def close(self) -> None:
        await self.api.aclose()

    async def create(self, wait: bool = True, **extra) -> tuple[str, str | None]:
        """(outcome, sandbox id): outcome is the status code, or the transport error's name."""
        try:
            r = await self.api.post("/v1/sandboxes", json={**self.spec, **extra},
                                    params={"wait_for": "running", "timeout": 60} if wait else None)
        except httpx.TransportError as exc:
            return type(exc).__name__, None
        if r.status_code != 202:
            return str(r.status_code), None
        body = r.json()
        return ("202" if not wait or body["state"] == "running" else f"202-{body['state']}"), body["id"]

    async def state(self, sid: str) -> str:
        try:
            r = await self.api.get(f"/v1/sandboxes/{sid}")
        except httpx.TransportError as exc:
            return type(exc).__name__
        return r.json()["state"] if r.status_code == 200 else str(r.status_code)

    async def exec_ok(self, sid: str) -> bool:
        try:
            r = await self.api.post(f"/v1/sandboxes/{sid}/exec", json={"cmd": ["true"], "timeout_s": 30})
        except httpx.TransportError:
            return False
        return r.status_code == 200 and r.json().get("exit_code") == 0

    async def gather(self, coros, limit: int = 16) -> list:
        gate = asyncio.Semaphore(limit)

        async def one(coro):
            async with gate:
                return await coro

        return await asyncio.gather(*(one(c) for c in coros))

    async def delete(self, ids) -> None:
        async def one(sid):
            try:
                await self.api.delete(f"/v1/sandboxes/{sid}")
            except httpx.TransportError:
                pass

        await self.gather([one(sid) for sid in ids])

    # -- one fault

    async def probe_until_recovered(self, started: float) -> tuple[float | None, int]:
        attempts = 0
        deadline = started + self.args.recover_timeout
        while time.monotonic() < deadline:
            attempts += 1
            outcome, sid = await self.create()
            if outcome == "202" and sid and await self.exec_ok(sid):
                recovered = time.monotonic() - started
                await self.delete([sid])
                return round(recovered, 2), attempts
            if sid:
                await self.delete([sid])
            await asyncio.sleep(0.25)
        return None, attempts

    async def fault(self, fault: str, long_lived: list[str]) -> tuple[dict, list[str]]:
        print(f"fault: {fault} ...", file=sys.stderr)
        started = time.monotonic()
        spawn = await asyncio.to_thread(self.plat.stop, fault)
        during = [asyncio.create_task(self.create(wait=False)) for _ in range(self.args.during)]
        await asyncio.sleep(0)  # sent while it is down
        down_s = time.monotonic() - started
        await asyncio.to_thread(self.plat.start, fault, spawn)
        restarted_s = time.monotonic() - started
        recover_s, probes = await self.probe_until_recovered(started)
        answers = await asyncio.gather(*during)
        row = {"fault": fault, "stop_s": round(down_s, 2), "back_s": round(restarted_s, 2), "recover_s": recover_s,
               "probes": probes, "during": dict(collections.Counter(outcome for outcome, _ in answers))}
        # The outage's accepted creates: each must run.
        accepted = [sid for outcome, sid in answers if sid]
        states = await self.settle(accepted)
        row["during_lost"] = sum(1 for s in states.values() if s not in LIVE)
        row["during_states"] = dict(collections.Counter(states.values()))
        row["during_lost_ids"] = [sid for sid, s in states.items() if s not in LIVE][:10]
        await self.delete(accepted)
        census, survivors = await self.census(long_lived)
        row.update(census)
        print(f"  {json.dumps(row)}", file=sys.stderr)
        return row, survivors

    async def settle(self, ids: list[str], timeout_s: float = 90) -> dict[str, str]:
        """Their states once none is pending/scheduled/starting any more (or at the deadline)."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = dict(zip(ids, await self.gather([self.state(sid) for sid in ids])))
            settled = all(s in LIVE | TERMINAL or (s.isdigit() and s < "500") for s in states.values())
            if settled or time.monotonic() > deadline:
                return states
            await asyncio.sleep(0.5)

    async def census(self, long_lived: list[str]) -> tuple[dict, list[str]]:
        """What became of ``long_lived`` (the sandboxes that survived so far): the lost ones and
        the survivors; and the containers of every node against the records."""
        states = await self.settle(long_lived)
        running = [sid for sid, s in states.items() if s in LIVE]
        execs = await self.gather([self.exec_ok(sid) for sid in running])
        lost = collections.Counter(s if s not in LIVE else "exec_failed"
                                   for sid, s in states.items() if s not in LIVE)
        lost["exec_failed"] += sum(1 for ok in execs if not ok)
        lost = {k: v for k, v in lost.items() if v}
        dup, orphans = await self.containers_vs_records()
        deadline = time.monotonic() + self.args.grace
        while orphans and time.monotonic() < deadline:  # an ended sandbox's container goes within a moment
            await asyncio.sleep(1)
            dup, orphans = await self.containers_vs_records()
        survivors = [sid for sid, ok in zip(running, execs, strict=True) if ok]
        return {"lost": sum(lost.values()), "lost_by": lost, "survivors": len(survivors), "duplicated": len(dup),
                "orphaned": len(orphans), "orphans": sorted(orphans)[:10]}, survivors

    async def containers_vs_records(self) -> tuple[set[str], set[str]]:
        where = await asyncio.to_thread(self.plat.containers)
        seen = collections.Counter(sid for ids in where.values() for sid in ids)
        dup = {sid for sid, n in seen.items() if n > 1}
        orphans = set()
        for node, ids in where.items():
            for sid in ids:
                try:
                    r = await self.api.get(f"/v1/sandboxes/{sid}")
                except httpx.TransportError:
                    continue
                record = r.json() if r.status_code == 200 else None
                if record is None or record["state"] in TERMINAL or record.get("node_id") != node:
                    orphans.add(sid)
        return dup, orphans

    # -- the whole run

    async def make_long_lived(self, count: int) -> tuple[list[str], dict]:
        made = await self.gather([self.create(timeout_s=3600) for _ in range(count)], limit=self.args.concurrency)
        return [sid for outcome, sid in made if outcome == "202" and sid], dict(collections.Counter(o for o, _ in made))

    async def submit_job(self) -> str:
        a = self.args
        job = await self.api.post("/v1/jobs", json={"spec": {**self.spec, "timeout_s": a.job_timeout}, "count": a.m})
        job.raise_for_status()
        job_id = job.json()["id"]
        # Let the job get going before the next fault.
        while (await self.api.get(f"/v1/jobs/{job_id}")).json()["admitted"] < min(a.m, 10):  # noqa: ASYNC110 - polls the api
            await asyncio.sleep(0.5)
        return job_id

    async def run(self) -> dict:
        a = self.args
        result: dict = {}
        t = time.monotonic()
        long_lived, outcomes = await self.make_long_lived(a.n)
        result["create"] = {"n": a.n, "running": len(long_lived), "s": round(time.monotonic() - t, 1),
                            "outcomes": outcomes}
        print(f"{len(long_lived)}/{a.n} running in {result['create']['s']} s", file=sys.stderr)
        job_id = await self.submit_job()
        result["job"] = {"id": job_id, "m": a.m, "timeout_s": a.job_timeout, "lost_with": []}
        result["faults"] = []
        for fault in a.faults:  # each counts what it lost of what the ones before left
            row, long_lived = await self.fault(fault, long_lived)
            result["faults"].append(row)
            if (await self.api.get(f"/v1/jobs/{job_id}")).status_code == 404:
                # The job went with this fault: count it lost, and put a new one in flight.
                result["job"]["lost_with"].append(fault)
                row["job"] = "lost"
                job_id = await self.submit_job()
                result["job"]["id"] = job_id
            if a.replenish and len(long_lived) < a.n:  # the next fault starts from N again
                more, outcomes = await self.make_long_lived(a.n - len(long_lived))
                row["replaced"], row["replace_outcomes"] = len(more), outcomes
                long_lived += more
        print("waiting for the job to complete ...", file=sys.stderr)
        result["job"].update(await self.job_outcome(job_id))
        await self.delete(long_lived)
        return result

    async def job_outcome(self, job_id: str) -> dict:
        deadline = time.monotonic() + self.args.job_deadline
        t = time.monotonic()
        while True:
            r = await self.api.get(f"/v1/jobs/{job_id}")
            if r.status_code == 404:  # gone with Redis's data
                return {"completed": 0, "lost": self.args.m, "counts": {"job_gone": self.args.m}, "admitted": None,
                        "pending": None, "wait_s": round(time.monotonic() - t, 1)}
            got = r.json()
            counts = got["counts"]
            ended = counts.get("terminated", 0) + counts.get("failed", 0) + counts.get("expired", 0)
            if (got["pending"] == 0 and ended >= got["count"]) or time.monotonic() > deadline:
                break
            await asyncio.sleep(2)
        done = counts.get("terminated", 0)
        return {"completed": done, "lost": got["count"] - done, "counts": counts, "admitted": got["admitted"],
                "pending": got["pending"], "wait_s": round(time.monotonic() - t, 1)}


# ------------------------------------------------------------------------------- output

def table(result: dict) -> str:
    head = ("fault", "recover_s", "lost", "left", "duplicated", "orphaned", "during (answers)", "during lost", "job")
    rows = [head]
    for f in result["faults"]:
        during = ", ".join(f"{k}:{v}" for k, v in sorted(f["during"].items()))
        lost = f"{f['lost']}" + (f" ({', '.join(f'{k}:{v}' for k, v in f['lost_by'].items())})" if f["lost"] else "")
        rows.append((f["fault"], "-" if f["recover_s"] is None else f"{f['recover_s']:g}", lost, str(f["survivors"]),
                     str(f["duplicated"]), str(f["orphaned"]), during, str(f["during_lost"]), f.get("job", "ok")))
    job = result["job"]
    rows.append((f"job of {job['m']}", f"(waited {job['wait_s']:g} s)", str(job["lost"]), str(job["completed"]), "-", "-",
                 ", ".join(f"{k}:{v}" for k, v in sorted(job["counts"].items())), "-",
                 f"lost with {', '.join(job['lost_with'])}" if job["lost_with"] else "completed" if not job["lost"] else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(v.ljust(widths[i]) for i, v in enumerate(r)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=500, help="long-lived sandboxes running through every fault")
    ap.add_argument("--m", type=int, default=1000, help="sandboxes of the job in flight")
    ap.add_argument("--job-timeout", type=int, default=30, help="lifetime of each of the job's sandboxes (s)")
    ap.add_argument("--job-deadline", type=float, default=900, help="how long to wait for the job to complete (s)")
    ap.add_argument("--faults", default=",".join(FAULTS), help=f"in order, from {','.join(FAULTS)}")
    ap.add_argument("--no-replenish", dest="replenish", action="store_false",
                    help="do not replace the sandboxes a fault lost before the next one")
    ap.add_argument("--during", type=int, default=10, help="creates sent while each fault is down")
    ap.add_argument("--signal", choices=["TERM", "KILL"], default="TERM", help="how services are stopped")
    ap.add_argument("--recover-timeout", type=float, default=180)
    ap.add_argument("--grace", type=float, default=30, help="how long a container may outlive its record (s)")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--memory-mb", type=int, default=32)
    ap.add_argument("--cpu", type=float, default=0.05)
    ap.add_argument("--disk-mb", type=int, default=16)
    ap.add_argument("--pids-limit", type=int, default=32, help="per sandbox (the nodes reserve it: 512 fits ~23 a node here)")
    ap.add_argument("--cpu-overcommit", type=float, default=16)
    ap.add_argument("--base-port", type=int, default=24400)
    ap.add_argument("--redis-port", type=int, default=29290)
    ap.add_argument("--amqp-port", type=int, default=29300)
    ap.add_argument("--keep-state", action="store_true")
    ap.add_argument("--json", default=None, help="write all numbers here")
    args = ap.parse_args()
    args.faults = [f for f in args.faults.split(",") if f]
    if unknown := set(args.faults) - set(FAULTS):
        ap.error(f"unknown faults {sorted(unknown)}")
    if os.geteuid() != 0:
        raise SystemExit("run as root: the platform runs real containers")

    tmp_root = tempfile.mkdtemp(prefix="corral-bench-faults-")
    os.chmod(tmp_root, 0o711)  # noqa: S103 - sandboxes' own uids reach their roots below it
    state = Path(tmp_root) / "state"
    result: dict = {
        "benchmark": "faults",
        "command": " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], os.getcwd()), *sys.argv[1:]]),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {"nproc": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
        "params": {k: v for k, v in vars(args).items() if k not in ("json", "keep_state")},
    }
    plat = Platform(state, args)
    started = time.time()
    try:
        print(f"starting platform ({args.nodes} nodes) in {state} ...", file=sys.stderr)
        plat.up()

        async def go() -> dict:
            bench = Bench(plat, args)
            try:
                return await bench.run()
            finally:
                await bench.close()

        result.update(asyncio.run(go()))
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
    print(f"\n{result['create']['running']}/{args.n} long-lived sandboxes; total {result['total_s']} s")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
