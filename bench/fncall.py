#!/usr/bin/env python3
"""fncall benchmark: Corral's stateless calls end to end through the api vs. a bare,
unisolated ``subprocess.run(["python3", "-c", code])`` loop, side by side in one run.

    python bench/fncall.py --n 300 --batch 2000 --concurrency 64 --json bench/results/fncall.json

Without --url/--api-key it brings its own platform up (scripts/corral_platform.py, temp state
dir, non-default ports, 2 node-agents) and tears it down at the end; it builds the runtime
tree first if this machine has none (scripts/build_fncall_runtime.py). Must run as root.

Phases (code: ``print(sum(range(1000)))`` unless said otherwise):
  corral serial       N calls one at a time through POST /v1/fncall (latency)
  corral batch        one POST /v1/fncall/batch of B calls, then GET ?wait=true (calls/s)
  corral concurrent   B calls with C in flight via corral.fncall_many (calls/s)
  bare loop           N x subprocess.run(["python3", "-c", code]) on the host, no isolation
  cpp a+b             K calls of C++ A+B with 10 test cases (compile + 10 runs + judge), serial
  runcode             B SandboxFusion /run_code calls through the sandbox-fusion PyPI client
                      (C threads, as verl's reward pool sends them), calls/s and its ratio to batch
  languages           L calls per language (tests/fncall_programs.py) through /run_code, serial:
                      compile + run p50 per language
"""

import argparse
import asyncio
import contextlib
import json
import os
import platform as pyplatform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "clients" / "python"))
sys.path.insert(0, str(ROOT / "bench"))
import platform_cpu  # noqa: E402
from platform_cpu import cpu_per_op, read_pid  # noqa: E402

CODE = "print(sum(range(1000)))"
APLUSB = "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n"
PHASES = ("serial", "batch", "concurrent", "bare", "cpp", "runcode", "languages")
TARGETS = {  # metric -> (op, value)
    "serial_p50_ms": ("<=", 25.0),
    "batch_calls_per_s": (">=", 150.0),
    "batch_vs_bare_ratio": (">=", 1.0),
    "cpp_aplusb_p50_ms": ("<=", 1500.0),
    # /run_code is one HTTP call per program: it need not beat a batch, only not fall far behind.
    "runcode_calls_per_s": (">=", 50.0),
    "runcode_vs_batch_ratio": (">=", 0.3),
}


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def summary(values: list[float]) -> dict:
    return {"p50": round(pct(values, 50), 2), "p90": round(pct(values, 90), 2), "p99": round(pct(values, 99), 2),
            "mean": round(statistics.mean(values), 2), "n": len(values)}


def internal(info: dict) -> dict[str, str]:
    """The header node-agents want on everything but /healthz and /metrics."""
    return {"X-Corral-Internal-Token": info["internal_token"]}


def bring_up(args) -> tuple[dict, Path]:
    subprocess.run([sys.executable, str(ROOT / "scripts/build_fncall_runtime.py")], check=True, capture_output=True)
    state = Path(tempfile.mkdtemp(prefix="corral-bench-fncall-"))
    env = dict(os.environ, CORRAL_FNCALL_POOL_MIN=str(args.pool_min), CORRAL_FNCALL_POOL_MAX=str(args.pool_max),
               CORRAL_LOG_LEVEL="WARNING")
    out = subprocess.run([sys.executable, str(ROOT / "scripts/corral_platform.py"), "up", "--state-dir", str(state),
                          "--nodes", str(args.nodes), "--base-port", str(args.base_port),
                          "--redis-port", str(args.redis_port), "--amqp-port", str(args.amqp_port),
                          "--log-level", "WARNING"],
                         env=env, check=True, capture_output=True, text=True)
    info = json.loads(out.stdout.strip().splitlines()[-1])
    nodes = [url for name, url in info["urls"].items() if name.startswith("node-")]
    deadline = time.monotonic() + 180  # 14 runtimes' pools on a loaded host
    while time.monotonic() < deadline:
        if all(httpx.get(f"{u}/v1/fncall/pools", headers=internal(info)).json()["status"] == "ready" for u in nodes):
            break
        time.sleep(0.2)
    return info, state


def bring_down(state: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts/corral_platform.py"), "down", "--state-dir", str(state)],
                   capture_output=True)


def corral_serial(api: str, key: str, n: int, body: dict) -> tuple[list[float], list[float]]:
    client_ms, api_ms = [], []
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
        for _ in range(5):  # warm up connections and pools
            http.post("/v1/fncall", json=body)
        for _ in range(n):
            started = time.perf_counter()
            r = http.post("/v1/fncall", json=body)
            client_ms.append((time.perf_counter() - started) * 1000)
            data = r.json()
            assert data["verdict"] == "accepted", data
            api_ms.append(data["latency_ms"])
    return client_ms, api_ms


FNCALL_SCRATCH = Path("/dev/shm/corral-fncall")
CGROUP_CPUACCT = Path("/sys/fs/cgroup/cpuacct/corral-fncall")


def fncall_sandboxes_cpu(agents: dict[int, str]) -> dict[str, float]:
    """The node-agents' fncall sandboxes (their workers' cgroups: zygotes, runs and cold sandboxes)."""
    sandboxes = 0.0
    for owner in FNCALL_SCRATCH.glob("*/.owner-pid"):  # a node-agent's instance
        if read_pid(owner) in agents:
            with contextlib.suppress(OSError):
                sandboxes += int((CGROUP_CPUACCT / owner.parent.name / "cpuacct.usage").read_text()) / 1e9
    return {"fncall sandboxes": sandboxes}


def cpu_snapshot(state: Path) -> dict[str, float]:
    return platform_cpu.cpu_snapshot(state, fncall_sandboxes_cpu)


def corral_batch(api: str, key: str, count: int, state: Path | None = None) -> dict:
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=600) as http:
        cpu_before = cpu_snapshot(state) if state is not None else None
        started = time.perf_counter()
        created = http.post("/v1/fncall/batch", json={"calls": [{"runtime": "python", "code": CODE}] * count})
        created.raise_for_status()
        page = http.get(f"/v1/fncall/batch/{created.json()['id']}", params={"wait": "true", "limit": 0,
                                                                            "timeout": 600}).json()
        elapsed = time.perf_counter() - started
        cpu_after = cpu_snapshot(state) if state is not None else None
    assert page["completed"] == count and page["verdicts"].get("accepted") == count, page
    out = {"calls": count, "seconds": round(elapsed, 3), "calls_per_s": round(count / elapsed, 1)}
    if cpu_before is not None:
        out["cpu_ms_per_call"] = cpu_per_op(cpu_before, cpu_after, count)
    return out


def corral_concurrent(api: str, key: str, count: int, concurrency: int) -> dict:
    import corral

    started = time.perf_counter()
    results = asyncio.run(corral.fncall_many([{"runtime": "python", "code": CODE}] * count, concurrency=concurrency,
                                             url=api, api_key=key))
    elapsed = time.perf_counter() - started
    assert all(r["verdict"] == "accepted" for r in results)
    return {"calls": count, "concurrency": concurrency, "seconds": round(elapsed, 3),
            "calls_per_s": round(count / elapsed, 1)}


def runcode_concurrent(api: str, key: str, count: int, concurrency: int) -> dict:
    """The sandbox-fusion client unchanged (requests, one call per thread), endpoint with the key."""
    import concurrent.futures

    import sandbox_fusion

    endpoint = f"{api}/sandboxfusion/{key}"
    request = sandbox_fusion.RunCodeRequest(code=CODE, language="python")

    def one(_: int) -> bool:
        return sandbox_fusion.run_code(request, endpoint=endpoint, max_attempts=1,
                                       client_timeout=60).run_result.stdout == "499500\n"

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        ok = sum(pool.map(one, range(count)))
    elapsed = time.perf_counter() - started
    assert ok == count, f"{count - ok} /run_code calls were not accepted"
    return {"calls": count, "concurrency": concurrency, "seconds": round(elapsed, 3),
            "calls_per_s": round(count / elapsed, 1)}


def languages(api: str, key: str, n: int) -> dict:
    """compile + run wall time per language: /run_code's execution_time of both phases, and the
    client's round trip, p50 over n calls each."""
    sys.path.insert(0, str(ROOT))
    from tests.fncall_programs import LANGUAGES, accepted

    out = {}
    with httpx.Client(timeout=120) as http:
        for language in LANGUAGES:
            server, client = [], []
            for _ in range(n):
                t = time.perf_counter()
                r = http.post(f"{api}/sandboxfusion/{key}/run_code", json={
                    "code": accepted(language), "language": language, "stdin": "40 2\n", "compile_timeout": 30})
                client.append((time.perf_counter() - t) * 1000)
                body = r.json()
                assert body["status"] == "Success", (language, body)
                server.append(sum((body[k] or {}).get("execution_time") or 0 for k in ("compile_result", "run_result"))
                              * 1000)
            out[language] = {"compile_run_p50_ms": round(pct(server, 50), 1), "client_p50_ms": round(pct(client, 50), 1),
                             "n": n}
    return out


def bare_loop(n: int) -> tuple[list[float], float]:
    times = []
    started = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        out = subprocess.run(["python3", "-c", CODE], capture_output=True, text=True)
        times.append((time.perf_counter() - t) * 1000)
        assert out.stdout == "499500\n"
    return times, n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/fncall.py")
    parser.add_argument("--url")
    parser.add_argument("--api-key")
    parser.add_argument("--n", type=int, default=300, help="serial calls (and bare-loop iterations)")
    parser.add_argument("--batch", type=int, default=2000, help="calls in the batch / concurrent phases")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--cpp", type=int, default=20, help="C++ A+B calls")
    parser.add_argument("--lang-n", type=int, default=5, help="calls per language in the languages phase")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--base-port", type=int, default=24000, help="of the platform it brings up")
    parser.add_argument("--redis-port", type=int, default=24379)
    parser.add_argument("--amqp-port", type=int, default=24672)
    parser.add_argument("--pool-min", type=int, default=4)
    parser.add_argument("--pool-max", type=int, default=16)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}")
    args = parser.parse_args()
    phases = set(args.phases.split(","))

    state = None
    if args.url and args.api_key:
        api, key = args.url, args.api_key
    else:
        info, state = bring_up(args)
        api, key = info["api"], info["api_key"]
    try:
        results: dict = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "host": {
            "cpus": os.cpu_count(), "kernel": pyplatform.release(), "python": pyplatform.python_version(),
            "loadavg_at_start": os.getloadavg()}, "nodes": args.nodes, "pool": [args.pool_min, args.pool_max]}
        if "serial" in phases:
            client_ms, api_ms = corral_serial(api, key, args.n, {"runtime": "python", "code": CODE})
            results["corral_serial_client_ms"] = summary(client_ms)
            results["corral_serial_api_ms"] = summary(api_ms)
        if "batch" in phases:
            results["corral_batch"] = corral_batch(api, key, args.batch, state)
        if "concurrent" in phases:
            try:
                results["corral_concurrent"] = corral_concurrent(api, key, args.batch, args.concurrency)
            except httpx.HTTPError as exc:  # not a target: record it and go on with the other phases
                results["corral_concurrent"] = {"error": f"{type(exc).__name__}: {exc}"}
        if "bare" in phases:
            bare_ms, bare_rate = bare_loop(args.n)
            results["bare_loop_ms"] = summary(bare_ms)
            results["bare_loop_calls_per_s"] = round(bare_rate, 1)
        if "cpp" in phases:
            cases = [{"stdin": f"{i} {i * 7}", "expected_stdout": f"{i * 8}\n"} for i in range(10)]
            cpp_client, _ = corral_serial(api, key, args.cpp, {"runtime": "cpp", "code": APLUSB, "tests": cases})
            results["cpp_aplusb_client_ms"] = summary(cpp_client)
        if "runcode" in phases:
            results["runcode_concurrent"] = runcode_concurrent(api, key, args.batch, args.concurrency)
        if "languages" in phases:
            results["languages"] = languages(api, key, args.lang_n)
        results["host"]["loadavg_at_end"] = os.getloadavg()
        if state is not None:
            nodes = [httpx.get(f"{u}/v1/fncall/pools", headers=internal(info)).json()
                     for n, u in info["urls"].items() if n.startswith("node-")]
            results["pools_at_end"] = [{"node": s["node_id"], **{p["runtime"]: p["size"] for p in s["pools"]}}
                                       for s in nodes]
    finally:
        if state is not None:
            bring_down(state)

    metrics = {}
    if "corral_serial_client_ms" in results:
        metrics["serial_p50_ms"] = results["corral_serial_client_ms"]["p50"]
    if "corral_batch" in results:
        metrics["batch_calls_per_s"] = results["corral_batch"]["calls_per_s"]
        if "bare_loop_calls_per_s" in results:
            metrics["batch_vs_bare_ratio"] = round(results["corral_batch"]["calls_per_s"]
                                                   / results["bare_loop_calls_per_s"], 2)
    if "runcode_concurrent" in results:
        metrics["runcode_calls_per_s"] = results["runcode_concurrent"]["calls_per_s"]
        if "corral_batch" in results:
            metrics["runcode_vs_batch_ratio"] = round(results["runcode_concurrent"]["calls_per_s"]
                                                      / results["corral_batch"]["calls_per_s"], 2)
    if "cpp_aplusb_client_ms" in results:
        metrics["cpp_aplusb_p50_ms"] = results["cpp_aplusb_client_ms"]["p50"]
    results["targets"] = {}
    print(f"{'metric':<24}{'value':>10}  target   ok")
    for name, value in metrics.items():
        op, target = TARGETS[name]
        ok = value <= target if op == "<=" else value >= target
        results["targets"][name] = {"value": value, "target": f"{op} {target}", "met": ok}
        print(f"{name:<24}{value:>10}  {op} {target:<6} {'yes' if ok else 'NO'}")
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
