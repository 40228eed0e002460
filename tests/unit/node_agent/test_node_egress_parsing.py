"""The egress service's pure parts: what a connection asks for (SNI, Host, CONNECT,
absolute-form), the verdict on it, and what the resolver answers."""

import asyncio
import ipaddress
import ssl

import dns.message
import dns.rcode
import pytest

from corral_node_agent.network.dns import answer, gateway_of
from corral_node_agent.network.proxy import EgressProxy, Refused, Request, parse_http_head, sni_of
from corral_node_agent.network.rules import SandboxRules


def client_hello(name: str) -> bytes:
    """A real ClientHello from Python's ssl module, for ``name``."""
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def test_sni_from_a_real_client_hello():
    assert sni_of(client_hello("Pypi.Mirror.Test")) == "pypi.mirror.test"
    assert sni_of(b"\x16\x03\x01\x00\x05\x01\x00") is None
    assert sni_of(b"GET / HTTP/1.1\r\n") is None


def test_http_heads():
    r = parse_http_head(b"GET /simple/ HTTP/1.1\r\nHost: pypi.test:8080\r\n\r\n", to_proxy_port=False, default_port=8080)
    assert (r.host, r.port, r.first_bytes.startswith(b"GET /simple/")) == ("pypi.test", 8080, True)
    r = parse_http_head(b"CONNECT pypi.test:443 HTTP/1.1\r\nHost: pypi.test:443\r\n\r\n", to_proxy_port=True,
                        default_port=3128)
    assert (r.host, r.port, r.reply_established, r.first_bytes) == ("pypi.test", 443, True, b"")
    r = parse_http_head(b"GET http://pypi.test:81/a?b HTTP/1.1\r\nHost: pypi.test:81\r\n\r\n", to_proxy_port=True,
                        default_port=3128)
    assert (r.host, r.port) == ("pypi.test", 81) and r.first_bytes.startswith(b"GET /a?b HTTP/1.1\r\n")
    for head, to_proxy_port in ((b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", True),
                                (b"GET / HTTP/1.0\r\n\r\n", False),
                                (b"GET / HTTP/1.1\r\n\r\n", False),
                                (b"\x00\x01garbage\r\n\r\n", False),
                                (b"GET https://a/ HTTP/1.1\r\nHost: a\r\n\r\n", True),
                                (b"CONNECT a HTTP/1.1\r\nHost: a\r\n\r\n", True),
                                (b"CONNECT a:0 HTTP/1.1\r\nHost: a\r\n\r\n", True),
                                (b"CONNECT a:1 HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", True)):
        with pytest.raises(Refused):
            parse_http_head(head, to_proxy_port=to_proxy_port, default_port=80)


# The same allowed IP literal asked for as a proxy request, however a client words it: each
# names 10.213.7.2:8080 (the target) wherever on the gateway it was sent.
PROXY_REQUESTS = [
    b"CONNECT 10.213.7.2:8080 HTTP/1.1\r\nHost: 10.213.7.2:8080\r\nUser-Agent: curl/8.5.0\r\n\r\n",  # curl -p -x
    b"CONNECT 10.213.7.2:8080 HTTP/1.1\r\n\r\n",  # printf | nc: HTTP/1.1 without Host
    b"CONNECT 10.213.7.2:8080 HTTP/1.0\r\n\r\n",  # openssl s_client -proxy, socat PROXY:
    b"GET http://10.213.7.2:8080/x HTTP/1.1\r\nHost: 10.213.7.2:8080\r\n\r\n",
    b"GET http://10.213.7.2:8080/x HTTP/1.1\r\n\r\n",
    b"GET HTTP://10.213.7.2:8080/x HTTP/1.0\r\n\r\n",
]


@pytest.mark.parametrize("to_proxy_port", [True, False], ids=["proxy-port", "other-gateway-port"])
@pytest.mark.parametrize("head", PROXY_REQUESTS)
def test_a_proxy_request_names_its_target_however_worded_and_wherever_sent(head, to_proxy_port):
    r = parse_http_head(head, to_proxy_port=to_proxy_port, default_port=8080 if not to_proxy_port else 3128)
    assert (r.host, r.port) == ("10.213.7.2", 8080)
    if head.startswith(b"CONNECT"):
        assert r.reply_established and r.first_bytes == b""
    else:  # sent on in origin-form, with the Host its target names (and only that one)
        first, *fields = r.first_bytes.split(b"\r\n\r\n")[0].split(b"\r\n")
        assert first.split(b" ")[:2] == [b"GET", b"/x"]
        assert [f for f in fields if f.lower().startswith(b"host:")] == [b"Host: 10.213.7.2:8080"]


def test_what_follows_a_proxy_request_head_is_passed_on():
    r = parse_http_head(b"CONNECT 10.0.0.5:22 HTTP/1.1\r\nHost: 10.0.0.5:22\r\n\r\nSSH-2.0-early\r\n",
                        to_proxy_port=True, default_port=3128)
    assert r.first_bytes == b"SSH-2.0-early\r\n"
    r = parse_http_head(b"POST http://10.0.0.5/u HTTP/1.1\r\nHost: evil.test\r\nContent-Length: 2\r\n\r\nhi",
                        to_proxy_port=True, default_port=3128)
    assert r.host == "10.0.0.5" and r.first_bytes == (b"POST /u HTTP/1.1\r\nHost: 10.0.0.5\r\n"
                                                      b"Content-Length: 2\r\n\r\nhi")


def verdict(rules: list[str], request: Request) -> str:
    """What the proxy decides for ``request`` under ``rules``: "allowed" or why not."""
    proxy = EgressProxy(rules_for=lambda _: None, forbidden=lambda: [ipaddress.ip_network("100.64.0.0/10")],
                        resolve=None, on_denied=lambda *_: None, proxy_port=3128)
    try:
        asyncio.run(proxy._judge(SandboxRules.from_texts(rules), request))
    except Refused as exc:
        return str(exc)
    return "allowed"


@pytest.mark.parametrize(("host", "port", "expected"), [
    ("10.213.7.2", 8080, "allowed"), ("10.213.7.3", 8080, "no rule allows it"), ("10.213.7.2", 8081, "no rule allows it"),
    ("100.96.0.4", 8080, "a forbidden address"), ("127.0.0.1", 8080, "a forbidden address")])
def test_a_target_gets_one_verdict_direct_connect_or_absolute(host, port, expected):
    """A direct connection to an IP literal, CONNECT and an absolute URL to it: one verdict,
    and what no rule opens stays closed to all three."""
    rules = ["10.213.7.2:8080", "100.96.0.0/16"]  # (the second is forbidden whatever it says)
    direct = Request(host=host, port=port)
    connect = parse_http_head(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode(), to_proxy_port=True,
                              default_port=3128)
    absolute = parse_http_head(f"GET http://{host}:{port}/ HTTP/1.1\r\n\r\n".encode(), to_proxy_port=True,
                               default_port=3128)
    assert [verdict(rules, r) for r in (direct, connect, absolute)] == [expected] * 3


def test_resolver_answers_only_allowed_names_with_the_gateway():
    rules = SandboxRules.from_texts(["pypi.test:8080", "*.corp.test"])
    rules_for = {"100.96.0.5": rules}.get

    def ask(name: str, rdtype: str = "A", client: str = "100.96.0.5"):
        wire, refused = answer(dns.message.make_query(name, rdtype).to_wire(), client, rules_for)
        return dns.message.from_wire(wire), refused

    reply, refused = ask("PyPI.test")
    assert reply.rcode() == dns.rcode.NOERROR and refused is None
    assert [r.address for r in reply.answer[0]] == ["100.96.0.4"] == [gateway_of("100.96.0.5")]
    assert ask("a.b.corp.test")[0].answer
    reply, refused = ask("pypi.test", "AAAA")
    assert reply.rcode() == dns.rcode.NOERROR and not reply.answer  # IPv6 closed
    reply, refused = ask("c2VjcmV0.exfil.test")
    assert reply.rcode() == dns.rcode.NXDOMAIN and refused == "c2vjcmv0.exfil.test"  # (names are lowercased)
    assert ask("corp.test")[0].rcode() == dns.rcode.NXDOMAIN
    assert ask("pypi.test", client="100.96.0.7")[0].rcode() == dns.rcode.REFUSED  # no rules file: not ours
    assert answer(b"\x00garbage", "100.96.0.5", rules_for) == (None, None)
