"""The whole platform as processes (scripts/corral_platform.py, as `make up` runs it): one per
test process, shared by the suites that drive it from outside (tests/e2e, tests/security).

The ``platform`` and ``vm_platform`` fixtures are registered once, in tests/conftest.py, so a
worker that runs both suites starts a single platform; both suites put their tests in the
xdist group "e2e", so two platforms never run at once on one checkout's ports (the base port
is 21000 + 200 × the worker index).

Needs root, crun and mkfs.erofs (real containers on real EROFS + overlay mounts).
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
OTHER_TENANT_KEY = "other-tenant-key-123"
# A key of the form E2B's SDKs accept ("e2b_" + 40 hex), for the platform's default tenant.
E2B_API_KEY = "e2b_" + "c0ffee" * 6 + "c0ff"
# Long enough for a SIGKILLed node-agent to restart and re-adopt (Python start-up on a loaded
# 2-core host takes up to ~3 s), short enough for the node-loss test to stay quick.
HEARTBEAT_TIMEOUT_S = 8.0
QEMU = "qemu-system-x86_64"
GUESTKIT_DIR = Path("/var/cache/corral/guestkit")


def vm_backends_missing() -> str:
    """Why the platform's node-agents cannot run microvm/vm sandboxes; empty when they can.
    CORRAL_E2E_VM=0 turns them off, =1 insists (a missing piece then fails the platform)."""
    wanted = os.environ.get("CORRAL_E2E_VM", "auto")
    if wanted == "0":
        return "VM backends disabled (CORRAL_E2E_VM=0)"
    missing = [] if shutil.which(QEMU) else [f"{QEMU} not on PATH"]
    if not GUESTKIT_DIR.is_dir() or not any(GUESTKIT_DIR.iterdir()):
        missing.append(f"no guest kit in {GUESTKIT_DIR} (python -m corral_node_agent guestkit build)")
    if missing and wanted == "1":
        pytest.fail(f"CORRAL_E2E_VM=1 but {'; '.join(missing)}")
    return "; ".join(missing)


def platform_missing() -> str:
    """Why the platform cannot run on this machine; empty when it can."""
    if os.geteuid() != 0:
        return "end-to-end tests need root (crun, mounts, cgroups)"
    tools = [t for t in ("crun", "mkfs.erofs", "busybox", "redis-server", "rabbitmq-server") if not shutil.which(t)]
    return f"missing tools: {', '.join(tools)}" if tools else ""


EGRESS_UPSTREAM_OCTET = 117  # 198.18.117.1: tests/egress_upstream.make_upstream(117)
# The security suite's own outside (tests/egress_upstream.make_upstream: one per xdist worker):
# its tests run beside the e2e suite's, and two upstreams on one subnet steal each other's route.
SECURITY_UPSTREAM_OCTET = 115
EGRESS_UPSTREAM = f"198.18.{EGRESS_UPSTREAM_OCTET}.1"
EGRESS_PRESETS = {"e2e-index": ["index.corral.test:8080"]}
EGRESS_HOSTS = {"index.corral.test": [EGRESS_UPSTREAM], "sibling.corral.test": [EGRESS_UPSTREAM],
                "meta.corral.test": ["169.254.169.254"], "loop.corral.test": ["127.0.0.1"]}


def run_platform(service_urls, tmp_path_factory):
    """Start the platform (2 node-agents) and yield its info; stop it afterwards."""
    import redis

    # Its own Redis database and vhost: the platform's processes outlive single tests and
    # must not compete with the in-process services other tests start.
    service_urls = service_urls["isolated"](1, "e2e")
    redis.Redis.from_url(service_urls["redis_url"]).flushdb()
    state = tmp_path_factory.mktemp("platform")
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    base_port = 21000 + 200 * worker
    # A short step lease so a test that kills the api sees its step interrupted quickly.
    env = dict(os.environ, CORRAL_API_MAX_UPLOAD_MB="1", CORRAL_LOG_JSON="true", CORRAL_API_ROLLOUT_STEP_LEASE_S="3",
               # Its nodes split the host between themselves only: a benchmark or another checkout's
               # platform running on this host at the same time must not leave them nothing.
               CORRAL_NODE_CAPACITY_REGISTRY_DIR=str(state / "capacity"),
               # Egress (tests/e2e/test_e2e_network.py, tests/security/test_network.py): a preset and
               # the names the nodes' egress proxies resolve; the "outside" is a namespace those
               # tests make at EGRESS_UPSTREAM.
               CORRAL_NETWORK_PRESETS=json.dumps(EGRESS_PRESETS), CORRAL_NODE_EGRESS_HOSTS=json.dumps(EGRESS_HOSTS))
    # Node-agents enable microvm/vm when QEMU is on PATH; without a guest kit those could not
    # boot, so the platform then runs containers only (a VM request is unschedulable).
    vm_missing = vm_backends_missing()
    if vm_missing:
        env["CORRAL_NODE_QEMU"] = "/nonexistent/qemu-disabled-for-e2e"
    cmd = [sys.executable, str(ROOT / "scripts/corral_platform.py"), "--state-dir", str(state),
           "--redis-url", service_urls["redis_url"], "--amqp-url", service_urls["amqp_url"]]
    # The two nodes split this host (half each); the suites hold twenty idle one-core sandboxes
    # at once, so on a 2-core machine each node's one core takes 16 (the default ratio is 8).
    up = subprocess.run([*cmd[:2], "up", *cmd[2:], "--nodes", "2", "--base-port", str(base_port),
                         "--cpu-overcommit", "16", "--heartbeat-timeout", str(HEARTBEAT_TIMEOUT_S),
                         "--extra-api-key", f"other:{OTHER_TENANT_KEY}",
                         "--extra-api-key", f"default:{E2B_API_KEY}", "--sandboxfusion-port", str(base_port + 50)],
                        env=env, capture_output=True, text=True)
    if up.returncode != 0:
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in (state / "logs").glob("*.log"))
        # Stop what did start, or it keeps the ports (and its own keys) for the next session.
        subprocess.run([*cmd[:2], "down", *cmd[2:]], env=env, capture_output=True)
        pytest.fail(f"platform did not come up:\n{up.stderr[-3000:]}\n{logs}")
    info = json.loads(up.stdout.strip().splitlines()[-1])
    info["state"] = state
    info["vm_backends"] = not vm_missing
    info["vm_missing"] = vm_missing
    yield info
    subprocess.run([*cmd[:2], "down", *cmd[2:]], env=env, capture_output=True)
    # Keep the logs; the layer store and the nodes' caches are GBs (the judge tree alone is
    # 0.8 GB) that pytest would otherwise keep for its last three runs.
    for bulky in ("images", "nodes", "servers"):
        shutil.rmtree(state / bulky, ignore_errors=True)


@pytest.fixture(scope="session")
def platform(service_urls, tmp_path_factory):
    yield from run_platform(service_urls, tmp_path_factory)


@pytest.fixture(scope="session")
def vm_platform(platform):
    """The platform, for tests that need microvm/vm sandboxes: its node-agents run VM backends
    (QEMU on PATH and a guest kit in /var/cache/corral/guestkit), else the test is skipped
    with the reason. Its nodes advertise the kinds they run (GET /v1/nodes on the scheduler)."""
    if not platform["vm_backends"]:
        pytest.skip(f"VM sandboxes unavailable: {platform['vm_missing']}")
    return platform


def fncall_ready(platform) -> dict:
    """Build the fncall runtime tree if this machine has none (cached), register it, then wait
    until every node's pools are ready; returns the platform."""
    out = subprocess.run([sys.executable, str(ROOT / "scripts/build_fncall_runtime.py")], capture_output=True,
                         text=True, timeout=1800)
    if out.returncode != 0:
        pytest.fail(f"building the fncall runtime failed:\n{out.stderr[-3000:]}")
    # The runtimes run on the "judge" environment (a Corral layer): register the tree (a no-op
    # when the platform already did at start).
    sys.path.insert(0, str(ROOT / "scripts"))
    from corral_platform import register_judge

    register_judge(platform["urls"]["image-service"], {**os.environ, "CORRAL_INTERNAL_TOKEN": platform["internal_token"]})
    nodes = [url for name, url in platform["urls"].items() if name.startswith("node-")]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        states = [httpx.get(f"{url}/v1/fncall/pools", timeout=5, headers=internal_headers(platform)).json()
                  for url in nodes]
        if all(s["status"] == "ready" for s in states):
            return platform
        time.sleep(0.2)
    pytest.fail(f"fncall pools not ready: {states}")


def internal_headers(platform) -> dict[str, str]:
    """What the platform's internal services (image-service, scheduler, node-agents,
    memory-manager) want on every route but /healthz and /metrics."""
    return {"X-Corral-Internal-Token": platform["internal_token"]}


def agent_pid(platform, node_id: str) -> int:
    return int((platform["state"] / "run" / f"{node_id}.pid").read_text())


def lazy_server_pid(platform, node_id: str) -> int:
    """The pid of the node's lazy-layer server (the process serving its lazily loaded layers)."""
    root = str(platform["state"] / "nodes" / node_id / "layers")
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = p.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"corral_node_agent.layers.lazy.server_main" in args and root.encode() in args:
            return int(p.parent.name)
    raise AssertionError(f"no lazy-layer server for {root}")


def log_lines(platform, service: str, needle: str, limit: int = 40) -> list[str]:
    """The last ``limit`` lines of a platform service's log that name ``needle`` (for a
    failure message: what that service did with a sandbox)."""
    path = platform["state"] / "logs" / f"{service}.log"
    if not path.exists():
        return []
    return [line for line in path.read_text(errors="replace").splitlines() if needle in line][-limit:]


def runtime_id(sandbox) -> str:
    """The name a sandbox's crun container, cgroup and directories have on its node (``sandbox``:
    the SDK's): its id, or that of the warm-pool container it was claimed from (its record's
    ``runtime.warm_pool``), which keeps the name it was started under."""
    runtime = sandbox.info.runtime  # the client's SandboxRuntime (or UNSET before it ran)
    return getattr(runtime, "additional_properties", {}).get("warm_pool") or sandbox.id


def leftovers(platform, node_id: str, sandbox) -> list[str]:
    """Everything a deleted sandbox (the SDK's) could leave behind on its node; empty when clean.
    Looked for under its id and under its runtime id (runtime_id: a claimed warm-pool container's)."""
    found = []
    names = sorted({sandbox.id, runtime_id(sandbox)})
    pid_file = platform["state"] / "run" / f"{node_id}.pid"
    if pid_file.exists():
        mountinfo = Path(f"/proc/{int(pid_file.read_text())}/mountinfo")
        if mountinfo.exists():
            found += [f"mount: {line.split()[4]}" for line in mountinfo.read_text().splitlines()
                      if any(name in line for name in names)]
    for name in names:
        for controller in ("memory", "pids", "cpu,cpuacct", "cpu", "freezer"):
            path = Path(f"/sys/fs/cgroup/{controller}/corral/{node_id}/{name}")
            if path.exists():
                found.append(f"cgroup: {path}")
        for what, path in (("dir", platform["state"] / "nodes" / node_id / "sandboxes" / name),
                           ("crun state", platform["state"] / "nodes" / node_id / "crun" / name),
                           ("vm dir", platform["state"] / "nodes" / node_id / "vms" / name)):
            if path.exists():
                found.append(f"{what}: {path}")
    sandbox_id = sandbox.id
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "qemu-system" in cmdline and f"/{sandbox_id}/" in cmdline:
                found.append(f"qemu process: {proc.name}")
    vm_cgroup = Path(f"/sys/fs/cgroup/memory/corral-vm/{node_id}/{sandbox_id}")
    if vm_cgroup.exists():
        found.append(f"cgroup: {vm_cgroup}")
    return found
