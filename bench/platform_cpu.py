"""CPU seconds spent by each part of a platform that a bench brought up with
scripts/corral_platform.py (its state dir), to report CPU per operation next to the rates.

    before = cpu_snapshot(state); ...; after = cpu_snapshot(state)
    cpu_per_op(before, after, count)  # {"api": 1.2, "node-agents": ..., "machine total": ...} in ms
"""

import os
import time
from collections.abc import Callable
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int, children: bool = False) -> float:
    """utime + stime of a process (all its threads); with ``children``, of its reaped children
    instead (for a node-agent: the crun calls and helpers it waited for)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    first = 13 if children else 11
    return (int(fields[first]) + int(fields[first + 1])) / CLK_TCK


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def agent_pids(state: Path) -> dict[int, str]:
    """The running node-agents of this state dir, by pid."""
    out = {}
    for pid_file in sorted((state / "run").glob("node-*.pid")):
        pid = read_pid(pid_file)
        if pid is not None:
            out[pid] = pid_file.stem
    return out


def cpu_snapshot(state: Path, extra: Callable[[dict[int, str]], dict[str, float]] | None = None) -> dict[str, float]:
    """CPU seconds so far of each service process of the state dir (node-agents summed, and
    what their reaped children used apart), RabbitMQ, Redis, this client and the whole
    machine; ``extra(agent_pids)`` adds parts a bench knows of (e.g. its sandboxes' cgroups)."""
    cpu: dict[str, float] = {}
    agents = agent_pids(state)
    for pid_file in sorted((state / "run").glob("*.pid")):
        pid = read_pid(pid_file)
        if pid is None or pid in agents:
            continue
        cpu[pid_file.stem] = process_cpu_s(pid)
    cpu["node-agents"] = sum(process_cpu_s(pid) for pid in agents)
    cpu["node-agents' children (crun, helpers)"] = sum(process_cpu_s(pid, children=True) for pid in agents)
    for name, pid_file in (("rabbitmq", state / "servers/rabbitmq/rabbitmq.pid"),
                           ("redis", state / "servers/redis/redis.pid")):
        pid = read_pid(pid_file)
        cpu[name] = process_cpu_s(pid) if pid else 0.0
    if extra is not None:
        cpu.update(extra(agents))
    cpu["bench client"] = time.process_time()
    with open("/proc/stat") as fh:
        ticks = [int(v) for v in fh.readline().split()[1:]]
    cpu["machine"] = (sum(ticks) - ticks[3] - ticks[4]) / CLK_TCK  # everything but idle and iowait
    return cpu


def cpu_per_op(before: dict[str, float], after: dict[str, float], count: int) -> dict[str, float]:
    """Milliseconds of CPU per operation of each part; "other" is the rest of the machine (other
    engineers' work, the kernel's own threads)."""
    per = {k: round((after[k] - before.get(k, 0.0)) * 1000 / count, 2) for k in after if k != "machine"}
    machine = round((after["machine"] - before["machine"]) * 1000 / count, 2)
    per["other (rest of the machine)"] = round(machine - sum(per.values()), 2)
    per["machine total"] = machine
    return per
