"""What every attempt in this suite checks after attacking: the attacker was contained, a
neighbour sandbox of another tenant (started before the attack) is unharmed and saw nothing
of it, the node is healthy, and deleting the attacker's sandboxes leaves nothing behind.

An attacker here is a tenant with an API key and nothing else: it drives the live platform
through the SDK and plain HTTP, uploads its tools (the static ``probe``, probe.c) through the
files API and runs them with exec, like model-written code would.
"""

import ctypes
import os
import secrets
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.live_platform import leftovers, runtime_id

HOME = "/home/user"
PROBE = f"{HOME}/probe"
# Every sandbox the suite creates carries this label, so a crashed run's can be found.
LABELS = {"suite": "security"}


def new_marker() -> str:
    """A token naming one attempt: in its file names, key descriptions and command lines, so a
    neighbour can look for any trace of it."""
    return f"atk{secrets.token_hex(6)}"


def hidden(marker: str) -> str:
    """A grep pattern for ``marker`` that does not match itself (``[a]tk...``): the grep that
    looks for the marker shows up in ``ps`` too."""
    return f"[{marker[0]}]{marker[1:]}"


def probe_result(output: str, what: str) -> str:
    """The result the probe printed for ``what`` ("OK" or an errno name)."""
    for line in output.splitlines():
        if line.startswith(what + " "):
            return line[len(what) + 1:].strip()
    raise AssertionError(f"the probe printed nothing for {what!r}: {output!r}")


def host_shmem_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no Shmem line in /proc/meminfo")


def host_memtotal_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no MemTotal line in /proc/meminfo")


def host_ip() -> str:
    """This host's address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))
        return s.getsockname()[0]


def node_paths(platform) -> list[str]:
    """Paths of the node's own that a sandbox's /proc/self/mountinfo must not name: the
    platform's state dir (the nodes' state dirs are in it), the conventional state and cache
    dirs, the host's init binary, this checkout (/work) and fncall's scratch dir."""
    return [str(platform["state"]), "/var/lib/corral", "/var/cache/corral", "/usr/bin/catatonit", "/work/",
            "corral-fncall"]


def mountinfo_naming(mountinfo: str, paths: list[str]) -> list[str]:
    """The lines of a mountinfo that name one of ``paths`` where a mount's origin shows: the
    root within its filesystem (4th field), the source and the superblock's options (after
    " - "). The mount point (5th field) is the sandbox's own path (fncall's /work is one)."""
    named = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) < 5:
            continue
        origin = " ".join([fields[3], line.partition(" - ")[2]])
        if any(path in origin for path in paths):
            named.append(line)
    return named


def host_can_inotify(count: int = 16) -> str:
    """Open ``count`` inotify instances as this (root) process: "" or why it could not."""
    libc = ctypes.CDLL(None, use_errno=True)
    fds = []
    try:
        for _ in range(count):
            fd = libc.inotify_init1(os.O_CLOEXEC)
            if fd < 0:
                return f"inotify_init1 failed on the host after {len(fds)}: {os.strerror(ctypes.get_errno())}"
            fds.append(fd)
        return ""
    finally:
        for fd in fds:
            os.close(fd)


def _start_time(pid: int) -> str | None:
    """The start time of a live process (None: gone, or a zombie waiting for its reaper)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def sandbox_cgroup_dirs(node_id: str, sandbox) -> list[Path]:
    """The cgroup v1 directories a sandbox's (the SDK's) processes live in (containers and VMs),
    named by its runtime id (a claimed warm-pool container keeps its own)."""
    found = []
    for parent in ("corral", "corral-vm"):
        path = Path(f"/sys/fs/cgroup/pids/{parent}/{node_id}/{runtime_id(sandbox)}")
        if path.is_dir():
            found.append(path)
    return found


def sandbox_processes(node_id: str, sandbox) -> dict[int, str]:
    """Host pid -> start time of every process the sandbox (the SDK's) has on the host."""
    procs = {}
    for cg in sandbox_cgroup_dirs(node_id, sandbox):
        for sub in [cg, *(p for p in cg.rglob("*") if p.is_dir())]:
            try:
                pids = (sub / "cgroup.procs").read_text().split()
            except OSError:
                continue
            for pid in map(int, pids):
                if (start := _start_time(pid)) is not None:
                    procs[pid] = start
    return procs


def host_uids(pids) -> set[int]:
    """The real uids the host sees for these pids (gone ones are skipped)."""
    uids = set()
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uids.add(int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1]))
    return uids


def node_problems(platform) -> list[str]:
    """What is wrong with the platform and its host; empty when healthy."""
    import pika
    import redis

    problems = []
    for name, url in platform["urls"].items():
        try:
            response = httpx.get(f"{url}/healthz", timeout=10)
        except httpx.HTTPError as exc:
            problems.append(f"{name} /healthz: {exc!r}")
            continue
        if response.status_code != 200:
            problems.append(f"{name} /healthz: {response.status_code} {response.text[:200]}")
        elif name.startswith("node-") and response.json().get("status") != "ok":
            problems.append(f"{name} /healthz: {response.text[:200]}")
    try:
        if not redis.Redis.from_url(platform["redis_url"], socket_timeout=5).ping():
            problems.append("redis: PING not answered")
    except redis.RedisError as exc:
        problems.append(f"redis: {exc!r}")
    try:
        pika.BlockingConnection(pika.URLParameters(platform["amqp_url"])).close()
    except pika.exceptions.AMQPError as exc:
        problems.append(f"rabbitmq: {exc!r}")
    try:
        subprocess.run(["true"], check=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        problems.append(f"the host cannot start a process: {exc!r}")
    if why := host_can_inotify():
        problems.append(why)
    return problems


@dataclass
class Neighbour:
    """A sandbox of the other tenant, with a canary file only it knows."""

    sandbox: object
    canary: str = field(default_factory=lambda: secrets.token_hex(16))

    @property
    def id(self) -> str:
        return self.sandbox.id

    @property
    def node_id(self) -> str:
        return self.sandbox.info.node_id

    def problems(self, marker: str | None) -> list[str]:
        """Empty when it still works, its canary is intact and it sees no trace of ``marker``."""
        pattern = hidden(marker or new_marker())
        script = (f"cat {HOME}/canary.txt; echo; "
                  f"ls -aR /home /tmp /dev/shm 2>/dev/null | grep -c '{pattern}'; "
                  f"ps -o args | grep -c '{pattern}'; "
                  f"cat /proc/keys 2>/dev/null | grep -c '{pattern}'; echo end")
        try:
            result = self.sandbox.exec(["sh", "-c", script], timeout_s=30)
        except Exception as exc:  # noqa: BLE001 - any failure to exec is the finding
            return [f"neighbour {self.id} on {self.node_id}: exec failed: {exc!r}"]
        lines = result.stdout.split("\n")
        if result.exit_code != 0 or len(lines) < 5 or lines[4] != "end":
            return [f"neighbour {self.id}: exec answered {result!r}"]
        found = []
        if lines[0] != self.canary:
            found.append(f"neighbour {self.id}: canary changed to {lines[0]!r}")
        for what, count in zip(("files", "processes", "keys"), lines[1:4], strict=True):
            if count != "0":
                found.append(f"neighbour {self.id} sees {count} {what} of the attacker ({marker})")
        return found


class Lab:
    """The suite's shared state: the platform, both tenants' clients, the probe, neighbours."""

    def __init__(self, platform, attacker, other, probe: bytes):
        self.platform = platform
        self.attacker = attacker  # the default tenant's Corral client
        self.other = other  # the other tenant's
        self.probe = probe
        self._neighbours: list[Neighbour] = []
        self.vm_neighbour: Neighbour | None = None

    @property
    def api(self) -> str:
        return self.platform["api"]

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.platform['api_key']}"}

    @property
    def node_ids(self) -> list[str]:
        return sorted(name for name in self.platform["urls"] if name.startswith("node-"))

    def create(self, client=None, **spec):
        spec.setdefault("memory_mb", 64)
        return (client or self.attacker).sandboxes.create(spec.pop("environment", "busybox"), labels=LABELS, **spec)

    def upload_probe(self, sandbox) -> None:
        sandbox.write_file(PROBE, self.probe, mode=0o755)

    def make_neighbour(self, **spec) -> Neighbour:
        neighbour = Neighbour(self.create(self.other, **spec))
        neighbour.sandbox.write_file(f"{HOME}/canary.txt", neighbour.canary)
        self.upload_probe(neighbour.sandbox)
        return neighbour

    def neighbours(self) -> list[Neighbour]:
        """One healthy neighbour on every node (made again if an earlier attempt killed one)."""
        alive = [n for n in self._neighbours if not n.problems(None)]
        for dead in [n for n in self._neighbours if n not in alive]:
            self.delete_quietly(dead.sandbox)
        self._neighbours = alive
        for _ in range(4 * len(self.node_ids)):
            missing = set(self.node_ids) - {n.node_id for n in self._neighbours}
            if not missing:
                break
            made = self.make_neighbour()
            if made.node_id in missing:
                self._neighbours.append(made)
            else:
                self.delete_quietly(made.sandbox)
        assert {n.node_id for n in self._neighbours} == set(self.node_ids), "no neighbour on every node"
        return list(self._neighbours)

    def all_neighbours(self) -> list[Neighbour]:
        return self.neighbours() + ([self.vm_neighbour] if self.vm_neighbour else [])

    def delete_quietly(self, sandbox) -> None:
        try:
            sandbox.delete(wait=True)
        except Exception:  # noqa: BLE001, S110 - best-effort cleanup; the test already has its verdict
            pass

    def close(self) -> None:
        for neighbour in [*self._neighbours, *([self.vm_neighbour] if self.vm_neighbour else [])]:
            self.delete_quietly(neighbour.sandbox)


class Attack:
    """One attempt: the attacker's sandboxes, its marker, and the checks that follow it."""

    def __init__(self, lab: Lab):
        self.lab = lab
        self.marker = new_marker()
        self.sandboxes: list = []
        self.neighbours = lab.neighbours()  # started before the attack

    def sandbox(self, probe: bool = True, **spec):
        sandbox = self.lab.create(**spec)
        self.sandboxes.append(sandbox)
        if probe:
            self.lab.upload_probe(sandbox)
        return sandbox

    def sh(self, sandbox, script: str, **kwargs):
        """Run a shell script in ``sandbox``; its command line carries the marker."""
        return sandbox.exec(["sh", "-c", f": {self.marker}; {script}"], **kwargs)

    def contained(self) -> None:
        """Every neighbour works and saw nothing; the node and the control plane answer."""
        problems = [p for n in self.lab.all_neighbours() for p in n.problems(self.marker)]
        problems += node_problems(self.lab.platform)
        assert not problems, "\n".join(problems)

    def end(self, *sandboxes) -> None:
        """Delete the attacker's sandboxes: every process goes, nothing is left on the node,
        and the neighbours and the node are still fine afterwards."""
        found = []
        for sandbox in sandboxes or list(self.sandboxes):
            node_id = sandbox.refresh().info.node_id
            processes = sandbox_processes(node_id, sandbox) if node_id else {}
            sandbox.delete(wait=True)
            if sandbox in self.sandboxes:
                self.sandboxes.remove(sandbox)
            assert sandbox.state == "terminated", f"{sandbox.id} ended as {sandbox.state}"
            if node_id:
                found += [f"{sandbox.id}: {what}" for what in leftovers(self.lab.platform, node_id, sandbox)]
            found += [f"{sandbox.id}: process {pid} still runs" for pid, start in processes.items()
                      if _start_time(pid) == start]
        assert not found, "\n".join(found)
        self.contained()

    def cleanup(self) -> None:
        for sandbox in self.sandboxes:
            self.lab.delete_quietly(sandbox)
