#!/usr/bin/env python3
"""Rollout step benchmark: what the durable trajectory log costs, and how fast a resume is.

    python bench/rollout_steps.py --n 200 --json bench/results/rollout_steps.json

Without --url/--api-key it brings its own platform up (scripts/corral_platform.py, temp state
dir, non-default ports) and tears it down at the end. Environment "busybox", memory_mb=64.

  direct exec      N x sandbox.exec(["true"])                    (no log: the floor)
  live step        N x rollout.exec(["true"])                    (claim row, run, commit, answer)
  replay step      N x the same indexes from a second attach     (answered from the log)
  fast-forward     attach + replay of all N steps, wall time     (what a preempted trainer pays)
  pause / resume   POST /pause, then the next step (resume + exec), K times
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "clients" / "python"))


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(values_ms: list[float]) -> dict:
    return {"n": len(values_ms), "p50": round(pct(values_ms, 50), 2), "p90": round(pct(values_ms, 90), 2),
            "p99": round(pct(values_ms, 99), 2), "mean": round(statistics.fmean(values_ms), 2)}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def run(url: str, key: str, n: int, k: int) -> dict:
    from corral import Corral

    with Corral(url, key) as corral:
        sandbox = corral.sandboxes.create("busybox", memory_mb=64)
        direct = [timed(lambda: sandbox.exec(["true"])) for _ in range(n)]
        sandbox.delete(wait=False)

        rollout = corral.rollouts.create("busybox", job_id="bench", memory_mb=64)
        live = [timed(lambda: rollout.exec(["true"])) for _ in range(n)]
        t0 = time.perf_counter()
        again = corral.rollouts.attach(rollout.id)
        replay = [timed(lambda: again.exec(["true"])) for _ in range(n)]
        fast_forward_ms = (time.perf_counter() - t0) * 1000
        assert again.replayed == n
        get_ms = timed(rollout.trajectory)

        pause, resume_step = [], []
        box = corral.sandboxes.get(rollout.sandbox_id)
        for _ in range(k):
            pause.append(timed(box.pause))
            resume_step.append(timed(lambda: again.exec(["true"])))
        rollout.finish(reward=0.0)
    return {"direct_exec_ms": summary(direct), "live_step_ms": summary(live), "replay_step_ms": summary(replay),
            "fast_forward_ms": {"steps": n, "wall": round(fast_forward_ms, 1)}, "get_trajectory_ms": round(get_ms, 1),
            "pause_ms": summary(pause), "resume_and_step_ms": summary(resume_step)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--pauses", type=int, default=20)
    ap.add_argument("--url", default=None)
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--base-port", type=int, default=18500)
    ap.add_argument("--redis-port", type=int, default=18579)
    ap.add_argument("--amqp-port", type=int, default=18872)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    state = None
    url, key = args.url, args.api_key
    if not (url and key):
        state = tempfile.mkdtemp(prefix="corral-bench-rollouts-")
        out = subprocess.run([sys.executable, str(ROOT / "scripts/corral_platform.py"), "up", "--state-dir", state,
                              "--nodes", "1", "--base-port", str(args.base_port), "--redis-port", str(args.redis_port),
                              "--amqp-port", str(args.amqp_port)], check=True, capture_output=True, text=True)
        info = json.loads(out.stdout.strip().splitlines()[-1])
        url, key = info["api"], info["api_key"]
    try:
        result = run(url, key, args.n, args.pauses)
    finally:
        if state:
            subprocess.run([sys.executable, str(ROOT / "scripts/corral_platform.py"), "down", "--state-dir", state],
                           check=False, capture_output=True)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
