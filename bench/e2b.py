"""The E2B-compatible surface against Corral's own SDK, in the same run on the same platform.

    sudo .venv/bin/python bench/e2b.py --n 20 --json bench/results/e2b.json

Per iteration (the two clients alternate, so both see the same host load):
- create → first command: ``Sandbox.create(); sbx.commands.run("true")`` (e2b 2.63.0, unchanged)
  against ``corral.sandboxes.create("busybox"); sb.exec("true")``; each sandbox is then killed;
- command round trip: ``--runs`` more ``true`` commands in one sandbox of each kind.
Reports p50/p90 of each and the E2B/Corral ratio (target ≤ 1.2× for create → first run).

Without --url/--api-key it starts its own platform (scripts/corral_platform.py, temp state
dir, --base-port, 2 nodes) with an E2B-form key for the same tenant, and stops it afterwards.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# This file is named after the SDK it measures: keep its own folder off the import path, or
# `import e2b` would find this script.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT / "clients/python"))
E2B_KEY = "e2b_" + "be7c4" * 8


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))], 2)


def summary(values_ms: list[float]) -> dict:
    return {"n": len(values_ms), "p50_ms": round(statistics.median(values_ms), 2), "p90_ms": pct(values_ms, 90),
            "min_ms": round(min(values_ms), 2)}


def run(url: str, corral_key: str, e2b_key: str, n: int, runs: int, environment: str) -> dict:
    from e2b import Sandbox

    from corral import Corral

    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=e2b_key)
    os.environ.pop("E2B_DEBUG", None)
    first = {"e2b": [], "corral": []}
    with Corral(url, corral_key) as corral:
        for _ in range(n):
            t0 = time.perf_counter()
            sbx = Sandbox.create(template=environment, timeout=120)
            sbx.commands.run("true")
            first["e2b"].append((time.perf_counter() - t0) * 1000)
            sbx.kill()
            t0 = time.perf_counter()
            sb = corral.sandboxes.create(environment)
            sb.exec("true")
            first["corral"].append((time.perf_counter() - t0) * 1000)
            sb.delete()
        round_trip = {"e2b": [], "corral": []}
        sbx = Sandbox.create(template=environment, timeout=300)
        sb = corral.sandboxes.create(environment)
        try:
            for _ in range(runs):
                t0 = time.perf_counter()
                sbx.commands.run("true")
                round_trip["e2b"].append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                sb.exec("true")
                round_trip["corral"].append((time.perf_counter() - t0) * 1000)
        finally:
            sbx.kill()
            sb.delete()
    out = {"create_first_run": {k: summary(v) for k, v in first.items()},
           "command_round_trip": {k: summary(v) for k, v in round_trip.items()}}
    for phase in out.values():
        phase["ratio_p50"] = round(phase["e2b"]["p50_ms"] / phase["corral"]["p50_ms"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20, help="create → first run iterations per client")
    ap.add_argument("--runs", type=int, default=50, help="command round trips per client")
    ap.add_argument("--environment", default="busybox", help="Corral environment (= E2B templateID)")
    ap.add_argument("--url", default=None)
    ap.add_argument("--api-key", default=None, help="Corral key (also used for E2B unless --e2b-key)")
    ap.add_argument("--e2b-key", default=None)
    ap.add_argument("--base-port", type=int, default=18500)
    ap.add_argument("--redis-port", type=int, default=18579)
    ap.add_argument("--amqp-port", type=int, default=18572)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    state = None
    if args.url:
        url, key, e2b_key = args.url, args.api_key, args.e2b_key or args.api_key
    else:
        state = tempfile.mkdtemp(prefix="corral-bench-e2b-")
        cmd = [sys.executable, str(ROOT / "scripts/corral_platform.py")]
        up = subprocess.run([*cmd, "up", "--state-dir", state, "--nodes", "2", "--base-port", str(args.base_port),
                             "--redis-port", str(args.redis_port), "--amqp-port", str(args.amqp_port),
                             "--extra-api-key", f"default:{E2B_KEY}"], check=True, capture_output=True, text=True)
        info = json.loads(up.stdout.strip().splitlines()[-1])
        url, key, e2b_key = info["api"], info["api_key"], E2B_KEY
    try:
        result = run(url, key, e2b_key, args.n, args.runs, args.environment)
    finally:
        if state:
            subprocess.run([sys.executable, str(ROOT / "scripts/corral_platform.py"), "down", "--state-dir", state],
                           check=False, capture_output=True)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
