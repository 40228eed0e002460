"""Bring the whole Corral platform up on this machine as background processes, or down.

    python scripts/corral_platform.py up   [--state-dir .state] [--nodes 2] [--with-debian]
    python scripts/corral_platform.py down [--state-dir .state]

Everything lives under the state dir: logs/<service>.log, run/<service>.pid, the servers'
data, image blobs, node state. `make up` / `make down` call this; the end-to-end tests use
it too, so the way users start Corral is the way it is tested.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def _ports(args: argparse.Namespace) -> dict[str, int]:
    base = args.base_port
    return {"api": base, "scheduler": base + 1, "image-service": base + 2, "memory-manager": base + 3}


def _env(args: argparse.Namespace, state: Path, redis_url: str, amqp_url: str) -> dict[str, str]:
    ports = _ports(args)
    env = dict(os.environ)
    env.update({
        "CORRAL_REDIS_URL": redis_url,
        "CORRAL_AMQP_URL": amqp_url,
        "CORRAL_IMAGE_SERVICE_URL": f"http://127.0.0.1:{ports['image-service']}",
        "CORRAL_INTERNAL_TOKEN": _secret(state / "internal-token"),
        "CORRAL_HEARTBEAT_TIMEOUT_S": str(args.heartbeat_timeout),
        "CORRAL_HEARTBEAT_INTERVAL_S": str(max(0.2, args.heartbeat_timeout / 5)),
        "CORRAL_LOG_LEVEL": args.log_level,
    })
    return env


def _node_capacity_env(args: argparse.Namespace) -> dict[str, str]:
    """The nodes split this host: each claims 1/N of it (docs/architecture.md, "Capacity"),
    unless the caller's environment sets a share itself; --cpu-overcommit sets the ratio."""
    env = {} if "CORRAL_NODE_HOST_SHARE" in os.environ else {"CORRAL_NODE_HOST_SHARE": repr(1 / args.nodes)}
    if args.cpu_overcommit:
        env["CORRAL_NODE_CPU_OVERCOMMIT"] = str(args.cpu_overcommit)
    return env


def register_judge(image_service_url: str, env: dict[str, str] | None = None) -> None:
    """Register the locally built judge tree (the fncall runtimes' root) as environment "judge"."""
    from corral_image_service.builders.judge import default_rootfs_dir

    work_dir = default_rootfs_dir().parent.parent  # build-base uses <work-dir>/judge/rootfs
    subprocess.run([PYTHON, "-m", "corral_image_service.cli", "build-base", "judge", "--name", "judge", "--version",
                    "1", "--url", image_service_url, "--work-dir", str(work_dir)],
                   check=True, capture_output=True, env=env)


# The Debian base's debootstrap tree, kept across state dirs like the judge tree: built once
# per machine (minutes), registered again in seconds by every later `up`.
DEBIAN_WORK_DIR = Path(os.environ.get("CORRAL_BASES_CACHE_DIR", "/var/cache/corral/bases"))


def register_debian(image_service_url: str, env: dict[str, str]) -> None:
    """Build (once) and register the Debian base (python3, pip, git) as environment "debian-python"."""
    DEBIAN_WORK_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run([PYTHON, "-m", "corral_image_service.cli", "build-base", "debian", "--name", "debian-python",
                    "--version", "1", "--url", image_service_url, "--work-dir", str(DEBIAN_WORK_DIR)],
                   check=True, env=env, stdout=subprocess.DEVNULL)


def _node_disk_mb(state: Path, nodes: int) -> str:
    """Each node's share of the disk its sandboxes' disks live on (all nodes share state's
    filesystem): 90% of what it has free, split evenly, unless CORRAL_NODE_DISK_CAPACITY_MB says."""
    if os.environ.get("CORRAL_NODE_DISK_CAPACITY_MB"):
        return os.environ["CORRAL_NODE_DISK_CAPACITY_MB"]
    st = os.statvfs(state)
    return str(int(st.f_bavail * st.f_frsize * 0.9 / max(nodes, 1)) // (1024 * 1024))


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (0600 from its first byte, and again if it existed
    with looser bits): the API key, the internal token, platform.json which holds both."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _secret(path: Path) -> str:
    if not path.exists():
        import secrets

        write_private(path, secrets.token_urlsafe(24))
    path.chmod(0o600)  # one an older version left 0644
    return path.read_text().strip()


def _running(name: str, state: Path) -> int | None:
    """The pid of this state dir's ``name`` when it is still running."""
    pid_file = state / "run" / f"{name}.pid"
    if not pid_file.exists():
        return None
    pid = int(pid_file.read_text())
    return pid if _alive(pid) else None


def port_taken(port: int) -> bool:
    """Whether something already holds ``port`` where the services listen (127.0.0.1, or any address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def check_ports_free(wanted: dict[str, int], state: Path) -> None:
    """Fail before starting anything when a port a service needs is held by another process:
    otherwise the service exits on its bind error while the other process (another platform,
    say) answers its /healthz, and `up` reports a platform that is not this one."""
    taken = [f"{name} needs port {port}" for name, port in wanted.items()
             if _running(name, state) is None and port_taken(port)]
    if taken:
        raise SystemExit("cannot start: " + "; ".join(taken) + " but another process listens there. Stop it "
                         "(another platform? `make down`, or scripts/corral_platform.py down --state-dir ITS_DIR), "
                         "or choose other ports (--base-port).")


def _start(name: str, module: list[str], env: dict[str, str], state: Path) -> int:
    pid_file = state / "run" / f"{name}.pid"
    running = _running(name, state)
    if running is not None:
        return running
    log = open(state / "logs" / f"{name}.log", "ab")
    proc = subprocess.Popen([PYTHON, "-m", *module], env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, cwd=state)
    pid_file.write_text(str(proc.pid))
    return proc.pid


def _wait_healthy(name: str, url: str, state: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        pid = int((state / "run" / f"{name}.pid").read_text())
        if not _alive(pid):
            tail = (state / "logs" / f"{name}.log").read_text()[-3000:]
            raise SystemExit(f"{name} exited during start; its log ends with:\n{tail}")
        time.sleep(0.1)
    raise SystemExit(f"{name} did not answer {url}/healthz within {timeout}s (log: {state}/logs/{name}.log)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of ours counts as dead
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True


def up(args: argparse.Namespace) -> dict:
    state = Path(args.state_dir).resolve()
    for sub in ("logs", "run", "servers", "images", "nodes", "api"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    redis_url, amqp_url = args.redis_url, args.amqp_url
    if not (redis_url and amqp_url):
        out = subprocess.run([str(ROOT / "scripts/servers.sh"), "start", str(state / "servers"),
                              str(args.redis_port), str(args.amqp_port)], check=True, capture_output=True, text=True)
        redis_url, amqp_url = out.stdout.split()[-2:]
    env = _env(args, state, redis_url, amqp_url)
    ports = _ports(args)
    api_key = _secret(state / "api-key")
    operator_key = _secret(state / "operator-key")  # for /v1/admin/* (docs/admin.md)
    services = {
        "image-service": (["corral_image_service"], {"CORRAL_IMAGE_PORT": str(ports["image-service"]),
                                                     "CORRAL_IMAGE_DATA_DIR": str(state / "images")}),
        "scheduler": (["corral_scheduler"], {"CORRAL_SCHEDULER_PORT": str(ports["scheduler"])}),
        "api": (["corral_api"], {"CORRAL_API_PORT": str(ports["api"]), "CORRAL_API_DATA_DIR": str(state / "api"),
                                 "CORRAL_API_KEYS": ",".join([f"{args.tenant}:{api_key}", *args.extra_api_key]),
                                 "CORRAL_API_OPERATOR_KEYS": f"operator:{operator_key}"}),
        # One memory-manager, for node-1 (its balloons through node-1's agent).
        "memory-manager": (["corral_memory_manager"], {
            "CORRAL_MEMORY_MANAGER_PORT": str(ports["memory-manager"]), "CORRAL_NODE_ID": "node-1",
            "CORRAL_MEMORY_MANAGER_NODE_AGENT_URL": f"http://127.0.0.1:{args.base_port + 101}"}),
    }
    if args.sandboxfusion_port:  # SandboxFusion's /run_code at the root of its own port, as the tenant's
        services["api"][1].update({"CORRAL_API_SANDBOXFUSION_PORT": str(args.sandboxfusion_port),
                                   "CORRAL_API_SANDBOXFUSION_TENANT": args.tenant})
    for n in range(1, args.nodes + 1):
        node_id = f"node-{n}"
        services[node_id] = (["corral_node_agent"], {
            "CORRAL_NODE_ID": node_id, "CORRAL_NODE_PORT": str(args.base_port + 100 + n),
            "CORRAL_NODE_STATE_DIR": str(state / "nodes" / node_id), **_node_capacity_env(args),
            "CORRAL_NODE_DISK_CAPACITY_MB": _node_disk_mb(state, args.nodes),
        })
    check_ports_free({name: int(extra.get("CORRAL_NODE_PORT") or ports[name]) for name, (_, extra) in services.items()},
                     state)
    urls = {}
    for name, (module, extra) in services.items():
        _start(name, module, {**env, **extra}, state)
        port = extra.get("CORRAL_NODE_PORT") or str(ports.get(name))
        urls[name] = f"http://127.0.0.1:{port}"
    for name, url in urls.items():
        _wait_healthy(name, url, state)
    build = [PYTHON, "-m", "corral_image_service.cli", "build-base", "busybox", "--name", "busybox", "--version", "1",
             "--url", urls["image-service"], "--work-dir", str(state / "images" / "builders")]
    subprocess.run(build, check=True, capture_output=True, env={**env, "CORRAL_IMAGE_DATA_DIR": str(state / "images")})
    # The fncall runtimes run on the "judge" environment; register it when this machine has
    # built its tree (scripts/build_fncall_runtime.py, minutes of debootstrap, done once).
    from corral_image_service.builders.judge import default_rootfs_dir, is_complete

    if is_complete(default_rootfs_dir()):
        register_judge(urls["image-service"], env)
    if args.with_debian:
        register_debian(urls["image-service"], {**env, "CORRAL_IMAGE_DATA_DIR": str(state / "images")})
    info = {"api": urls["api"], "api_key": api_key, "operator_key": operator_key, "tenant": args.tenant, "urls": urls,
            "redis_url": redis_url,
            "amqp_url": amqp_url, "state_dir": str(state), "internal_token": env["CORRAL_INTERNAL_TOKEN"]}
    if args.sandboxfusion_port:
        info["sandboxfusion"] = f"http://127.0.0.1:{args.sandboxfusion_port}"
    write_private(state / "platform.json", json.dumps(info, indent=2))
    return info


def wait_fncall(args: argparse.Namespace) -> None:
    """Wait until every node's fncall pools serve (`make up` says "Corral is up" only then): on a
    fresh state dir each node first mounts the judge tree the image-service imported."""
    state = Path(args.state_dir).resolve()
    info = json.loads((state / "platform.json").read_text())
    nodes = {name: url for name, url in info["urls"].items() if name.startswith("node-")}
    headers = {"X-Corral-Internal-Token": info["internal_token"]}
    deadline, said = time.monotonic() + args.timeout, {}
    while True:
        for name, url in nodes.items():
            try:
                said[name] = httpx.get(f"{url}/v1/fncall/pools", headers=headers, timeout=5).json().get("status", "?")
            except (httpx.HTTPError, ValueError) as exc:
                said[name] = f"no answer ({type(exc).__name__})"
        if all(status == "ready" for status in said.values()):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"fncall is not ready after {args.timeout:.0f} s: "
                             + "; ".join(f"{n}: {s}" for n, s in said.items()) + f" (logs: {state}/logs)")
        time.sleep(0.5)


def stop_process(state: Path, name: str, timeout: float = 10.0) -> None:
    pid_file = state / "run" / f"{name}.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink()
        return
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)


def down(args: argparse.Namespace) -> None:
    state = Path(args.state_dir).resolve()
    run = state / "run"
    names = [p.stem for p in run.glob("*.pid")] if run.exists() else []
    for name in sorted(names, key=lambda n: n != "api"):  # stop taking requests first
        stop_process(state, name)
    info = json.loads((state / "platform.json").read_text()) if (state / "platform.json").exists() else {}
    for node_dir in sorted((state / "nodes").glob("node-*")) if (state / "nodes").exists() else []:
        env = dict(os.environ, CORRAL_NODE_ID=node_dir.name, CORRAL_NODE_STATE_DIR=str(node_dir))
        if info.get("redis_url"):
            env["CORRAL_REDIS_URL"] = info["redis_url"]
        subprocess.run([PYTHON, "-m", "corral_node_agent", "cleanup"], env=env, check=False, capture_output=True)
    if (state / "servers").exists():
        subprocess.run([str(ROOT / "scripts/servers.sh"), "stop", str(state / "servers")], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(prog="corral_platform")
    parser.add_argument("command", choices=["up", "down", "wait-fncall"])
    parser.add_argument("--state-dir", default=str(ROOT / ".state"))
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--base-port", type=int, default=8000)
    parser.add_argument("--redis-port", type=int, default=6379)
    parser.add_argument("--amqp-port", type=int, default=5672)
    parser.add_argument("--redis-url", default="", help="use this Redis instead of starting one")
    parser.add_argument("--amqp-url", default="", help="use this RabbitMQ instead of starting one")
    parser.add_argument("--tenant", default="default")
    parser.add_argument("--extra-api-key", action="append", default=[], metavar="TENANT:KEY",
                        help="another tenant's key (repeatable)")
    parser.add_argument("--heartbeat-timeout", type=float, default=10.0)
    parser.add_argument("--cpu-overcommit", type=float, default=0.0,
                        help="one-core sandboxes per core of a node's share (default: the node-agent's, 8)")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--sandboxfusion-port", type=int, default=0,
                        help="also serve SandboxFusion's /run_code without credentials on 127.0.0.1:PORT")
    parser.add_argument("--with-debian", action="store_true", help="also build (once per machine) and register a Debian base with python3, pip and git "
                             "as environment debian-python")
    parser.add_argument("--timeout", type=float, default=600.0, help="wait-fncall: the longest wait")
    args = parser.parse_args()
    if args.command == "up":
        info = up(args)
        print(json.dumps(info))
    elif args.command == "wait-fncall":
        wait_fncall(args)
    else:
        down(args)


if __name__ == "__main__":
    main()
