"""Egress allowlists against real crun + nftables + the egress service: sandboxes reach what
their rules allow (through DNS and the proxy) and nothing else, whatever the rules say about
the node, the platform, other sandboxes and link-local addresses. The "outside" is a
namespace the test makes (tests/egress_upstream.py); its names come from egress_hosts."""

import asyncio
import os
import socket
import subprocess
import time
import uuid

import pytest
import pytest_asyncio

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.network import NetworkPolicy
from corral_common.contracts.sandboxes import SandboxSpec
from corral_node_agent.backends.container import ContainerBackend
from corral_node_agent.backends.types import RootFs
from corral_node_agent.errors import BadInput
from corral_node_agent.settings import NodeAgentSettings
from tests.egress_upstream import make_upstream

pytestmark = pytest.mark.asyncio

BANNER = "corral-host-listener"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    www = tmp_path_factory.mktemp("www")
    (www / "ok.txt").write_text("hello from upstream\n")
    (www / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    up = make_upstream(114)
    try:
        up.serve(str(www), 8080)
        yield up
    finally:
        up.close()


@pytest.fixture(scope="module")
def host_listener():
    """A TCP server on every address of the node's namespace, answering a banner: a sandbox
    that printed the banner reached the host."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 0))  # noqa: S104 - the node's own addresses are what the test probes
    srv.listen(64)
    stop = False

    def serve():
        while not stop:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.sendall(BANNER.encode() + b"\n")
            conn.close()

    import threading
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop = True
    srv.close()


def node_addresses() -> list[str]:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return sorted({line.split()[3].split("/")[0] for line in out.splitlines()})


@pytest_asyncio.fixture
async def backend(state_dir, node_id, base_layer, upstream):
    settings = NodeAgentSettings(
        node_id=node_id, state_dir=state_dir, egress_pool=2,
        egress_hosts={"pypi.corral.test": [upstream.address], "files.corral.test": [upstream.address],
                      "meta.corral.test": ["169.254.169.254"], "home.corral.test": ["127.0.0.1"],
                      "node.corral.test": [upstream.host_address]},
        network_presets={"pypi": ["pypi.corral.test:8080"]})
    b = ContainerBackend(settings)
    yield b
    await b.close()


async def start(backend, base_layer, network, **spec) -> str:
    sid = "e-" + uuid.uuid4().hex[:10]
    await backend.start(sid, SandboxSpec(environment="busybox", memory_mb=128, disk_mb=64, pids_limit=64,
                                         network=network, **spec), RootFs([base_layer]))
    return sid


async def run(backend, sid, cmd: str, user: str | None = None, timeout_s: float = 20):
    req = ExecRequest(cmd=["sh", "-c", cmd], timeout_s=timeout_s, **({"user": user} if user else {}))
    return await backend.exec(sid, req)


def http_get(url: str, out: str = "") -> str:
    """A shell line fetching ``url`` with HTTP/1.0 over busybox nc (busybox-static's wget
    crashes in its resolver): the response, head and body, on stdout (or into ``out``)."""
    assert url.startswith("http://")
    authority, _, path = url[len("http://"):].partition("/")
    host, _, port = authority.partition(":")
    request = f"GET /{path} HTTP/1.0\\r\\nHost: {authority}\\r\\n\\r\\n"
    return f"printf '{request}' | nc -w 5 {host} {port or 80}" + (f" > {out}" if out else "")


async def fetch(backend, sid, url: str) -> tuple[int, str]:
    """(0, body) for a 200, else (1, whatever came back)."""
    r = await run(backend, sid, http_get(url))
    head, _, body = r.stdout.partition("\r\n\r\n")
    return (0, body) if head.startswith("HTTP/1.0 200") else (1, r.stdout)


async def banner_from(backend, sid, host: str, port: int) -> bool:
    r = await run(backend, sid, f"nc -w 3 {host} {port} </dev/null")
    return BANNER in r.stdout


async def test_preset_allows_its_name_and_nothing_beside_it(backend, base_layer, upstream):
    sid = await start(backend, base_layer, {"presets": ["pypi"]})
    assert await fetch(backend, sid, "http://pypi.corral.test:8080/ok.txt") == (0, "hello from upstream\n")
    # The sibling name on the same server, the same name on another port, and the address itself.
    for url in ("http://files.corral.test:8080/ok.txt", "http://pypi.corral.test:8081/ok.txt",
                f"http://{upstream.address}:8080/ok.txt"):
        code, out = await fetch(backend, sid, url)
        assert code != 0 and "hello" not in out, url
    ns = await run(backend, sid, "nslookup pypi.corral.test; nslookup other.example; nslookup files.corral.test")
    gateway = backend._sandboxes[sid].net.gateway
    assert gateway in ns.stdout
    assert ns.stdout.count("NXDOMAIN") + ns.stderr.count("NXDOMAIN") >= 2, ns
    usage = backend.usage(sid)
    await until_counted(backend, sid)
    assert backend.usage(sid).network_denied >= 3 and usage.network_rx_bytes >= 0


async def until_counted(backend, sid):
    from tests.polling import until
    await until(lambda: backend.usage(sid).network_rx_bytes > 0, timeout_s=10, what="byte counters")


@pytest.mark.parametrize("rules", [[], ["pypi.corral.test:8080"], ["0.0.0.0/0"],
                                   ["*.corral.test", "169.254.0.0/16", "127.0.0.0/8", "100.64.0.0/10"]])
async def test_forbidden_targets_refused_under_every_rule_set(backend, base_layer, upstream, host_listener, rules):
    neighbour = await start(backend, base_layer, {"allow": []})
    await run(backend, neighbour, f"nc -l -p {host_listener} -e echo {BANNER} &")
    sid = await start(backend, base_layer, {"allow": rules})
    me, other = backend._sandboxes[sid].net, backend._sandboxes[neighbour].net
    targets = [*node_addresses(), "169.254.169.254", other.address, other.gateway, "100.96.255.254"]
    for target in targets:
        assert not await banner_from(backend, sid, target, host_listener), target
    # The proxy port and the service names: an allowed name resolving somewhere forbidden.
    for name in ("meta.corral.test", "home.corral.test", "node.corral.test"):
        assert not await banner_from(backend, sid, name, host_listener), name
        code, _ = await fetch(backend, sid, f"http://{name}:{host_listener}/")
        assert code != 0
    code, _ = await fetch(backend, sid, f"http://127.0.0.1:{host_listener}/")  # its own loopback
    assert code != 0
    # Positive control: with a rule that covers it, the upstream is reachable (the probes could pass).
    if rules and rules[0] in ("0.0.0.0/0", "pypi.corral.test:8080"):
        target = upstream.address if rules[0] == "0.0.0.0/0" else "pypi.corral.test"
        assert (await fetch(backend, sid, f"http://{target}:8080/ok.txt"))[0] == 0
    assert me.address != other.address


async def test_root_inside_cannot_change_its_network(backend, base_layer, upstream):
    sid = await start(backend, base_layer, {"allow": []})
    for cmd in ("ip addr add 100.96.0.77/31 dev eth0", "ip link set eth0 down", "ip route del default",
                "ip route add 198.18.0.0/15 dev eth0", "ip link add d0 type dummy",
                "echo 0 > /proc/sys/net/ipv6/conf/all/disable_ipv6"):
        r = await run(backend, sid, cmd, user="root")
        assert r.exit_code != 0, cmd
    r = await run(backend, sid, "ip -4 addr show eth0; ip -6 addr; cat /proc/sys/net/ipv6/conf/all/disable_ipv6")
    assert backend._sandboxes[sid].net.address in r.stdout and "inet6" not in r.stdout and r.stdout.strip().endswith("1")


async def test_rules_change_live(backend, base_layer, upstream):
    sid = await start(backend, base_layer, {"allow": ["files.corral.test:8080"]})
    assert (await fetch(backend, sid, "http://pypi.corral.test:8080/ok.txt"))[0] != 0
    await backend.set_network(sid, NetworkPolicy(presets=["pypi"]))
    assert await fetch(backend, sid, "http://pypi.corral.test:8080/ok.txt") == (0, "hello from upstream\n")
    assert (await fetch(backend, sid, "http://files.corral.test:8080/ok.txt"))[0] != 0
    await backend.set_network(sid, NetworkPolicy())
    assert (await fetch(backend, sid, "http://pypi.corral.test:8080/ok.txt"))[0] != 0


async def test_network_none_has_no_interface_and_cannot_gain_one(backend, base_layer):
    sid = await start(backend, base_layer, "none")
    r = await run(backend, sid, "ls /sys/class/net; cat /etc/resolv.conf 2>/dev/null; true")
    assert r.stdout.split()[:1] == ["lo"] and "eth0" not in r.stdout
    with pytest.raises(BadInput):
        await backend.set_network(sid, NetworkPolicy(presets=["pypi"]))
    assert backend.egress.last_counters(sid) == {}


async def test_bandwidth_cap_and_byte_counts(backend, base_layer, upstream):
    sid = await start(backend, base_layer, {"presets": ["pypi"], "bandwidth_mbit": 4})
    t0 = time.monotonic()
    r = await run(backend, sid, http_get("http://pypi.corral.test:8080/big.bin", out="/tmp/big") + "; wc -c < /tmp/big",
                  timeout_s=60)
    took = time.monotonic() - t0
    assert int(r.stdout.split()[-1]) > 2 * 1024 * 1024
    assert took > 2 * 1024 * 1024 * 8 / 4e6 * 0.7, took  # 2 MiB at 4 Mbit/s: ~4.2 s
    usage = (await backend.stop(sid))
    assert usage.network_rx_bytes > 2 * 1024 * 1024 and usage.network_tx_bytes > 0
    _ = asyncio
