#!/usr/bin/env python3
"""Where a serial create's time goes: joins a `sandbox_lifecycle.py --keep-state` run's serial
create_trace (client wall clock) with the scheduler's and node-agents' log timestamps
(`sandbox.transition`, `sandbox.started ms=`), by sandbox id; prints p50/p90 per hop.

    python bench/create_breakdown.py bench/results/sandbox_lifecycle_fastpath_base.json <state dir>/logs
"""

import argparse
import glob
import json
import statistics
from datetime import datetime

HOPS = ["client -> scheduled", "scheduled -> starting", "starting -> backend start", "backend start",
        "started -> running", "running -> client", "total"]


def events(logs: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for path in glob.glob(f"{logs}/*.log"):
        with open(path) as fh:
            for line in fh:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                sid = d.get("sandbox_id") if isinstance(d, dict) else None
                if not sid:
                    continue
                at = datetime.fromisoformat(d["timestamp"].replace("Z", "+00:00")).timestamp()
                e = out.setdefault(sid, {})
                if d.get("event") == "sandbox.transition":
                    e.setdefault(d["state"], at)
                elif d.get("event") == "sandbox.started":
                    e["started"], e["ms"] = at, d["ms"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result_json")
    ap.add_argument("logs_dir")
    args = ap.parse_args()
    with open(args.result_json) as fh:
        trace = json.load(fh)["corral"]["serial"]["create_trace"]
    ev = events(args.logs_dir)
    hops: dict[str, list[float]] = {k: [] for k in HOPS}
    for sid, start, end in trace:
        e = ev.get(sid, {})
        if not all(k in e for k in ("scheduled", "starting", "started", "running")):
            continue
        backend_start = e["started"] - e["ms"] / 1000
        for hop, s in zip(HOPS, [e["scheduled"] - start, e["starting"] - e["scheduled"], backend_start - e["starting"],
                                 e["ms"] / 1000, e["running"] - e["started"], end - e["running"], end - start],
                          strict=True):
            hops[hop].append(s * 1000)
    print(f"n={len(hops['total'])}\n| hop | p50 ms | p90 ms |\n|---|---|---|")
    for hop, values in hops.items():
        values.sort()
        if values:
            print(f"| {hop} | {statistics.median(values):.1f} | {values[int(len(values) * 0.9)]:.1f} |")


if __name__ == "__main__":
    main()
