"""Egress through the live platform and the unchanged SDK: `network=` on create, a preset
that opens the operator's index, its sibling name refused, DNS answering nothing else, live
rule changes (PATCH /v1/sandboxes/{id}/network), refusals counted and listed, bad policies
refused with 422 naming the rule. The "outside" is a namespace this module makes."""

import httpx
import pytest

from corral.errors import CorralError
from tests.egress_upstream import make_upstream
from tests.live_platform import EGRESS_UPSTREAM, EGRESS_UPSTREAM_OCTET
from tests.polling import until_sync


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    www = tmp_path_factory.mktemp("www")
    (www / "simple.txt").write_text("the operator's index\n")
    up = make_upstream(EGRESS_UPSTREAM_OCTET, per_worker=False)  # the platform's preset names it
    assert up.address == EGRESS_UPSTREAM
    try:
        up.serve(str(www), 8080)
        yield up
    finally:
        up.close()


def get(sandbox, url: str) -> str:
    """HTTP/1.0 over busybox nc (busybox-static's wget crashes in its resolver)."""
    authority, _, path = url.removeprefix("http://").partition("/")
    host, _, port = authority.partition(":")
    request = f"GET /{path} HTTP/1.0\\r\\nHost: {authority}\\r\\n\\r\\n"
    return sandbox.exec(["sh", "-c", f"printf '{request}' | nc -w 5 {host} {port or 80}"], timeout_s=30).stdout


def test_preset_sibling_dns_and_live_change(corral, upstream):
    with corral.sandboxes.create("busybox", memory_mb=64, network={"presets": ["e2e-index"]}) as sb:
        assert sb.info.network.presets == ["e2e-index"]
        assert "the operator's index" in get(sb, "http://index.corral.test:8080/simple.txt")
        assert "the operator's index" not in get(sb, "http://sibling.corral.test:8080/simple.txt")
        dns = sb.exec(["sh", "-c", "nslookup exfil-0123.example.org 2>&1; nslookup sibling.corral.test 2>&1"]).stdout
        assert dns.count("NXDOMAIN") >= 2, dns
        sb.set_network({"allow": ["sibling.corral.test:8080"]})
        assert "the operator's index" in get(sb, "http://sibling.corral.test:8080/simple.txt")
        assert "the operator's index" not in get(sb, "http://index.corral.test:8080/simple.txt")
        assert sb.refresh().info.network.allow == ["sibling.corral.test:8080"]
        def counted():
            state = sb.network()
            return state if state["counters"].get("denied", 0) >= 3 else None
        state = until_sync(counted, timeout_s=10, what="refusals counted")
        assert any(d["target"].startswith("dns:exfil-0123") for d in state["denied"]), state
        assert state["counters"]["rx_bytes"] > 0


def test_network_none_stays_closed_and_cannot_be_opened(corral, upstream):
    with corral.sandboxes.create("busybox", memory_mb=64) as sb:
        assert sb.info.network == "none"
        assert sb.exec(["sh", "-c", "ls /sys/class/net"]).stdout.split() == ["lo"]
        with pytest.raises(CorralError) as exc:
            sb.set_network({"presets": ["e2e-index"]})
        assert exc.value.status == 409 and exc.value.code == "network_none"


@pytest.mark.parametrize("network,loc", [
    ({"allow": ["bad..name"]}, ["body", "network", "allow", 0]),
    ({"allow": ["ok.example", "169.254.169.254"]}, ["body", "network", "allow", 1]),
    ({"allow": ["127.0.0.1:6379"]}, ["body", "network", "allow", 0]),
    ({"allow": ["0.0.0.0/0"]}, ["body", "network", "allow", 0]),
    ({"allow": ["100.96.0.0/24"]}, ["body", "network", "allow", 0]),
    ({"presets": ["no-such-preset"]}, ["body", "network", "presets", 0]),
    ({"allow": ["::1"]}, ["body", "network", "allow", 0]),
    ("all", ["body", "network"]),
])
def test_bad_policies_are_422_naming_the_rule(platform, network, loc):
    r = httpx.post(f"{platform['api']}/v1/sandboxes", json={"environment": "busybox", "network": network},
                   headers={"authorization": f"Bearer {platform['api_key']}"}, timeout=30)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["details"][0]["loc"] == loc, r.text


def test_platform_addresses_are_422(platform):
    node_urls = [u for name, u in platform["urls"].items() if name.startswith("node-")]
    api = platform["api"]
    for url in [api, *node_urls]:
        host_port = url.split("//")[1].rstrip("/")
        r = httpx.post(f"{api}/v1/sandboxes", json={"environment": "busybox", "network": {"allow": [host_port]}},
                       headers={"authorization": f"Bearer {platform['api_key']}"}, timeout=30)
        assert r.status_code == 422, (url, r.text)


def test_network_routes_are_tenant_scoped(corral, platform, upstream):
    from tests.live_platform import OTHER_TENANT_KEY

    with corral.sandboxes.create("busybox", memory_mb=64, network={"allow": []}) as sb:
        other = {"authorization": f"Bearer {OTHER_TENANT_KEY}"}
        url = f"{platform['api']}/v1/sandboxes/{sb.id}/network"
        assert httpx.get(url, headers=other, timeout=30).status_code == 404
        r = httpx.patch(url, json={"presets": ["e2e-index"]}, headers=other, timeout=30)
        assert r.status_code == 404
        assert httpx.get(url, timeout=30).status_code == 401
        assert sb.network()["network"] == {"allow": [], "presets": [], "bandwidth_mbit": None}
        r = httpx.patch(url, json={"allow": ["169.254.169.254"]},
                        headers={"authorization": f"Bearer {platform['api_key']}"}, timeout=30)
        assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["body", "allow", 0]
