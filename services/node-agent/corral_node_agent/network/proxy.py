"""The egress proxy: every TCP connection a sandbox opens ends here, and is judged.

nftables redirects each of a sandbox's TCP connections, whatever its destination, to this
proxy's port (nft.py); the connection's original destination (SO_ORIGINAL_DST) says what the
sandbox asked for:

- its own gateway, at the proxy port: an explicit HTTP proxy (``HTTPS_PROXY`` style):
  ``CONNECT host:port`` or an absolute-form ``GET http://host:port/...``;
- its own gateway, another port: a name our resolver answered (dns.py) — the name comes
  from the TLS ClientHello's SNI or from the HTTP Host header, the port is the original one
  (a proxy request there, CONNECT or absolute-form, is taken as at the proxy port);
- any other address: a connection to an IP literal, judged by the CIDR rules and spliced
  through as it is (any TCP protocol).

Whichever way a sandbox names a target (a direct connection, CONNECT, an absolute URL), the
target is judged by the same rules (``_judge``), so the verdict is one.

An allowed name is resolved here (the operator's ``egress_hosts`` map, or the configured
resolver, or the node's), every forbidden address among the answers is dropped
(corral_common.contracts.network.is_forbidden: loopback, link-local and metadata, the node's own
addresses, the sandboxes' subnet, the platform's services, the operator's deny list), and
the proxy connects to what is left — by address, so nothing resolves twice. Its upstream
sockets are made in the node's namespace by a process running as an unprivileged user.

Why not an existing proxy: the candidates on Debian and PyPI were measured (HOST-NOTES,
docs/network.md): tinyproxy holds one filter list per process (a process per rule set),
has no CIDR or port rules and does not refuse what a name resolves to; proxy.py adds ~22 ms
per request and 48 MB. What is ours here is the decision and the byte splice; HTTP heads are
parsed by h11 and DNS by dnspython.
"""

import asyncio
import contextlib
import ipaddress
import socket
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import h11

from corral_common.contracts.network import is_forbidden
from corral_node_agent.network.dns import gateway_of
from corral_node_agent.network.rules import SandboxRules

SO_ORIGINAL_DST = 80
HEAD_LIMIT = 64 * 1024
TLS_RECORD_LIMIT = 16 * 1024 + 5
FIRST_BYTES_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
CHUNK = 256 * 1024


def original_destination(sock: socket.socket) -> tuple[str, int]:
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(packed), port


def is_local(address: str) -> bool:
    """Whether ``address`` is one of this host's own (any interface, including one added a
    moment ago): the kernel routes a local address through its local table, with that very
    address as the source. A UDP connect sends nothing; ~10 us."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((address, 9))
        return probe.getsockname()[0] == address
    except OSError:
        return False  # no route: the connect fails anyway
    finally:
        probe.close()


def sni_of(hello: bytes) -> str | None:
    """The server name of a TLS ClientHello record (None: none, or not a ClientHello)."""
    try:
        if hello[0] != 0x16 or hello[5] != 0x01:
            return None
        pos = 5 + 4 + 2 + 32  # record header, handshake header, version, random
        pos += 1 + hello[pos]  # session id
        pos += 2 + int.from_bytes(hello[pos:pos + 2], "big")  # cipher suites
        pos += 1 + hello[pos]  # compression methods
        end = pos + 2 + int.from_bytes(hello[pos:pos + 2], "big")
        pos += 2
        while pos + 4 <= end:
            kind, size = int.from_bytes(hello[pos:pos + 2], "big"), int.from_bytes(hello[pos + 2:pos + 4], "big")
            pos += 4
            if kind == 0:  # server_name: list length, type 0 (host_name), name length, name
                if hello[pos + 2] != 0:
                    return None
                length = int.from_bytes(hello[pos + 3:pos + 5], "big")
                return hello[pos + 5:pos + 5 + length].decode("ascii").lower()
            pos += size
    except (IndexError, UnicodeDecodeError):
        return None
    return None


@dataclass
class Request:
    """What a sandbox asked for on one connection."""

    host: str  # a name, or an IPv4 literal
    port: int
    first_bytes: bytes = b""  # to send upstream before splicing
    reply_established: bool = False  # CONNECT: answer 200 before splicing
    http: bool = False  # refusals can be an HTTP 403


class Refused(Exception):
    def __init__(self, reason: str, request: Request | None = None):
        super().__init__(reason)
        self.request = request


def parse_http_head(head: bytes, *, to_proxy_port: bool, default_port: int) -> Request:
    """The target of an HTTP request head (h11 parses it).

    A proxy request names its target itself, and is taken as one wherever on the gateway it
    was sent (``to_proxy_port`` or another port: a name our resolver answered): ``CONNECT
    host:port`` or an absolute-form ``GET http://host:port/...``. Its target is judged like a
    direct connection to it, so the three ways to one target get one verdict. It needs no
    Host header (the request line names the target; an HTTP/1.1 one without is what a
    client like ``printf 'CONNECT ...' | nc`` sends), and an absolute-form request is sent on
    with the Host the target names (RFC 9112 3.2.2). Any other request is for the name our
    resolver gave, named by its Host header, at the port the sandbox connected to; the proxy
    port itself takes proxy requests only."""
    head_end = head.find(b"\r\n\r\n")
    if head_end < 0:
        raise Refused("not an HTTP request (no end of head)")
    lines = head[:head_end].split(b"\r\n")
    has_host = any(line.lower().startswith(b"host:") for line in lines[1:])
    # h11 refuses an HTTP/1.1 head without Host; a proxy request needs none, so it is parsed
    # with a stand-in (dropped below: what is judged and sent on comes from the request line).
    parsed = head if has_host else b"\r\n".join([lines[0], b"Host: corral-proxy", *lines[1:]]) + head[head_end:]
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_LIMIT)
    conn.receive_data(parsed)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError as exc:
        raise Refused(f"not an HTTP request ({exc})") from None
    if not isinstance(event, h11.Request):
        raise Refused("not an HTTP request")
    method, target = event.method.decode(), event.target.decode("latin-1")
    after_head = head[head_end + 4:]  # sent before any answer (a body, early tunnel bytes): passed on
    if method == "CONNECT":
        host, port = _split_host_port(target, None)
        return Request(host=host, port=port, first_bytes=after_head, reply_established=True, http=True)
    if target[:7].lower() == "http://":
        authority, slash, path = target[7:].partition("/")
        host, port = _split_host_port(authority, 80)
        request_line = b"%s %s HTTP/%s" % (event.method, ("/" + path if slash else "/").encode("latin-1"),
                                          event.http_version)
        fields = [b"Host: " + authority.encode("latin-1")]
        fields += [name + b": " + value for name, value in event.headers.raw_items() if name.lower() != b"host"]
        return Request(host=host, port=port, http=True,
                       first_bytes=b"\r\n".join([request_line, *fields]) + b"\r\n\r\n" + after_head)
    if to_proxy_port:
        raise Refused("the proxy port takes CONNECT or an absolute http:// URL")
    if not has_host:
        raise Refused("no Host header")
    host_header = next(v.decode("latin-1") for k, v in event.headers if k == b"host")
    host, _ = _split_host_port(host_header, default_port)
    return Request(host=host, port=default_port, first_bytes=head, http=True)


def _split_host_port(text: str, default: int | None) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or "]" in port:
        host, port = text, ""
    if not port:
        if default is None:
            raise Refused(f"no port in {text!r}")
        return host.lower().strip("[]"), default
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise Refused(f"bad port in {text!r}")
    return host.lower().strip("[]"), int(port)


def _ipv4(host: str) -> ipaddress.IPv4Address | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if not isinstance(address, ipaddress.IPv4Address):
        raise Refused("IPv6 is closed")
    return address


@dataclass
class EgressProxy:
    rules_for: Callable[[str], SandboxRules | None]
    forbidden: Callable[[], Iterable[ipaddress.IPv4Network]]
    resolve: Callable[[str], object]  # async: name -> [IPv4 text]
    on_denied: Callable[[str, str, str], None]  # (sandbox address, target, reason)
    proxy_port: int
    max_connections_per_sandbox: int = 256
    _open: dict[str, int] = field(default_factory=dict)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = writer.get_extra_info("peername")[0]
        if self._open.get(client, 0) >= self.max_connections_per_sandbox:
            self.on_denied(client, "*", "too many connections")
            writer.transport.abort()
            return
        self._open[client] = self._open.get(client, 0) + 1
        try:
            await self._serve(client, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, OSError):
            pass
        finally:
            self._open[client] -= 1
            if not self._open[client]:
                del self._open[client]
            with contextlib.suppress(Exception):  # already gone
                writer.close()

    async def _serve(self, client: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        rules = self.rules_for(client)
        request: Request | None = None
        try:
            if rules is None:
                raise Refused("not a sandbox of this node")
            dst, dst_port = original_destination(writer.get_extra_info("socket"))
            if dst != gateway_of(client):
                request = Request(host=dst, port=dst_port)
            else:
                request = await self._read_request(reader, to_proxy_port=dst_port == self.proxy_port, port=dst_port)
            addresses = await self._judge(rules, request)
            upstream_reader, upstream_writer = await self._connect(addresses, request.port)
        except Refused as exc:
            request = exc.request or request
            target = f"{request.host}:{request.port}" if request else "?"
            self.on_denied(client, target, str(exc))
            if request is not None and request.http:
                body = f"corral egress: {target} refused: {exc}\n".encode()
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
            else:  # a reset, as a closed port would answer (not an accept followed by EOF)
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
            return
        try:
            if request.reply_established:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if request.first_bytes:
                upstream_writer.write(request.first_bytes)
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        finally:
            upstream_writer.transport.abort()

    async def _read_request(self, reader: asyncio.StreamReader, *, to_proxy_port: bool, port: int) -> Request:
        first = await asyncio.wait_for(reader.read(5), FIRST_BYTES_TIMEOUT_S)
        if not first:
            raise Refused("closed before saying where to")
        if first[0] == 0x16 and not to_proxy_port:  # a TLS record: the ClientHello names the server
            while len(first) < 5:
                first += await asyncio.wait_for(reader.readexactly(5 - len(first)), FIRST_BYTES_TIMEOUT_S)
            size = int.from_bytes(first[3:5], "big")
            if size + 5 > TLS_RECORD_LIMIT:
                raise Refused("oversized TLS record")
            hello = first + await asyncio.wait_for(reader.readexactly(size), FIRST_BYTES_TIMEOUT_S)
            name = sni_of(hello)
            if not name:
                raise Refused("TLS without a server name (SNI)")
            return Request(host=name, port=port, first_bytes=hello)
        head = first
        while b"\r\n\r\n" not in head:
            if len(head) > HEAD_LIMIT:
                raise Refused("request head too long")
            more = await asyncio.wait_for(reader.read(4096), FIRST_BYTES_TIMEOUT_S)
            if not more:
                raise Refused("closed mid-request")
            head += more
        return parse_http_head(head, to_proxy_port=to_proxy_port, default_port=port)

    async def _judge(self, rules: SandboxRules, request: Request) -> list[str]:
        forbidden = tuple(self.forbidden())
        literal = _ipv4(request.host)
        if literal is not None:
            if is_forbidden(literal, forbidden) or is_local(str(literal)):
                raise Refused("a forbidden address", request)
            if not rules.allows_address(literal, request.port):
                raise Refused("no rule allows it", request)
            return [str(literal)]
        if not rules.allows_name(request.host, request.port):
            raise Refused("no rule allows it", request)
        try:
            answers = await self.resolve(request.host)  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - any resolver failure is a refusal
            raise Refused(f"cannot resolve ({exc.__class__.__name__})", request) from None
        allowed = [a for a in answers if not is_forbidden(ipaddress.ip_address(a), forbidden) and not is_local(a)]
        if not allowed:
            raise Refused("resolves only to forbidden addresses" if answers else "does not resolve", request)
        return allowed

    async def _connect(self, addresses: list[str], port: int):
        last: Exception | None = None
        for address in addresses:
            try:
                return await asyncio.wait_for(asyncio.open_connection(address, port, limit=CHUNK), CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                last = exc
        raise Refused(f"upstream unreachable ({last.__class__.__name__})")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, RuntimeError):
            pass
