"""The egress service's pure parts: what a connection asks for (SNI, Host, CONNECT,
absolute-form) and what the resolver answers."""

import ssl

import dns.message
import dns.rcode
import pytest

from corral_node_agent.network.dns import answer, gateway_of
from corral_node_agent.network.proxy import Refused, parse_http_head, sni_of
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
    r = parse_http_head(b"GET /simple/ HTTP/1.1\r\nHost: pypi.test:8080\r\n\r\n", explicit=False, default_port=8080)
    assert (r.host, r.port, r.first_bytes.startswith(b"GET /simple/")) == ("pypi.test", 8080, True)
    r = parse_http_head(b"CONNECT pypi.test:443 HTTP/1.1\r\nHost: pypi.test:443\r\n\r\n", explicit=True,
                        default_port=3128)
    assert (r.host, r.port, r.reply_established, r.first_bytes) == ("pypi.test", 443, True, b"")
    r = parse_http_head(b"GET http://pypi.test:81/a?b HTTP/1.1\r\nHost: pypi.test:81\r\n\r\n", explicit=True,
                        default_port=3128)
    assert (r.host, r.port) == ("pypi.test", 81) and r.first_bytes.startswith(b"GET /a?b HTTP/1.1\r\n")
    for head, explicit in ((b"CONNECT a:1 HTTP/1.1\r\nHost: a\r\n\r\n", False),
                           (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", True),
                           (b"GET / HTTP/1.0\r\n\r\n", False),
                           (b"\x00\x01garbage\r\n\r\n", False),
                           (b"CONNECT a HTTP/1.1\r\nHost: a\r\n\r\n", True)):
        with pytest.raises(Refused):
            parse_http_head(head, explicit=explicit, default_port=80)


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
