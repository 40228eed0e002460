"""The sandboxes' resolver: it answers only names a sandbox's rules allow.

An allowed name resolves to the sandbox's own gateway (the egress proxy), whatever its real
addresses: the proxy resolves the name itself when the sandbox connects and refuses
forbidden addresses then, so DNS rebinding gains nothing, and the answer tells the sandbox
nothing about the network outside. Any other name is NXDOMAIN, and no query is ever
forwarded, so DNS cannot carry data out. AAAA for an allowed name is an empty answer
(IPv6 is closed). Messages are parsed and built with dnspython.
"""

import asyncio
import ipaddress
from collections.abc import Callable

import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from corral_node_agent.network.rules import SandboxRules

TTL_S = 5  # short: a rule change is seen at once


def gateway_of(address: str) -> str:
    """A sandbox's gateway: the other end of its /31."""
    return str(ipaddress.IPv4Address(int(ipaddress.IPv4Address(address)) ^ 1))


def answer(wire: bytes, client: str, rules_for: Callable[[str], SandboxRules | None]) -> tuple[bytes | None, str | None]:
    """The reply to one query from ``client`` (None: not a query we answer) and the name
    refused, if any."""
    try:
        query = dns.message.from_wire(wire)
    except Exception:  # noqa: BLE001 - malformed: no answer at all
        return None, None
    if query.flags & dns.flags.QR:
        return None, None
    reply = dns.message.make_response(query)
    reply.flags |= dns.flags.RA
    rules = rules_for(client)
    if rules is None or query.opcode() != dns.opcode.QUERY or len(query.question) != 1:
        reply.set_rcode(dns.rcode.REFUSED)
        return reply.to_wire(), None
    question = query.question[0]
    name = question.name.to_text(omit_final_dot=True).lower()
    if question.rdclass != dns.rdataclass.IN or not rules.knows_name(name):
        reply.set_rcode(dns.rcode.NXDOMAIN)
        return reply.to_wire(), name
    if question.rdtype in (dns.rdatatype.A, dns.rdatatype.ANY):
        reply.answer.append(dns.rrset.from_text(question.name, TTL_S, "IN", "A", gateway_of(client)))
    return reply.to_wire(), None


class DnsProtocol(asyncio.DatagramProtocol):
    def __init__(self, rules_for: Callable[[str], SandboxRules | None], on_refused: Callable[[str, str], None]):
        self.rules_for = rules_for
        self.on_refused = on_refused
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        reply, refused = answer(data, addr[0], self.rules_for)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)
        if refused:
            self.on_refused(addr[0], f"dns:{refused}")
