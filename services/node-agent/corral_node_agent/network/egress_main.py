"""The node's egress service: the sandboxes' resolver (dns.py) and egress proxy (proxy.py)
in one process of their own, started and fed by the node-agent (egress.py).

    python -m corral_node_agent.network.egress_main '<json config>'

It binds its two sockets inside the egress namespace, steps back into the node's namespace
(where its upstream connections are made), drops to an unprivileged uid and serves. A
crash or overload of it costs sandboxes their egress, never the agent its event loop.

A sandbox's rules are the file ``<rules_dir>/<its address>.json`` (a JSON list of rules),
which the agent writes whole and renames into place; the service reads it when it changed
(its mtime, checked at every connection and query), so a change holds at the next connection
without a round trip, and a missing file means no rules (refused; DNS REFUSED). On stdout, JSON
lines: ``{"ready": true}`` once serving, and ``{"denied": {"addr", "target", "reason"}}``
for each refusal. It ends when its stdin closes (the agent is gone).
"""

import asyncio
import ipaddress
import json
import os
import socket
import sys

# Everything imported up front: after dropping privileges the service may not be able to read
# the installation any more.
import dns.asyncresolver
from pyroute2 import IPRoute

from corral_common.contracts.network import ALWAYS_FORBIDDEN, parse_forbidden
from corral_host import netns
from corral_node_agent.network.dns import DnsProtocol
from corral_node_agent.network.proxy import EgressProxy
from corral_node_agent.network.rules import SandboxRules

HOST_ADDRESSES_REFRESH_S = 2.0


def host_addresses() -> list[ipaddress.IPv4Network]:
    """The node's own IPv4 addresses (every interface of this namespace), as /32s."""
    with IPRoute() as ipr:
        return [ipaddress.ip_network(a.get("IFA_ADDRESS") or a.get_attr("IFA_ADDRESS"))
                for a in ipr.get_addr(family=socket.AF_INET)]


class EgressService:
    def __init__(self, config: dict):
        self.config = config
        self.rules: dict[str, tuple[int, SandboxRules]] = {}  # address -> (mtime_ns, rules)
        self.rules_dir_fd = -1
        self.static = (*ALWAYS_FORBIDDEN, *parse_forbidden(config.get("forbidden", [])))
        self.hosts: dict[str, list[str]] = {k.lower(): v for k, v in config.get("hosts", {}).items()}
        self.resolver = config.get("resolver", "")
        # Known before the first connection is served (main), refreshed every few seconds.
        self._host_nets: tuple[ipaddress.IPv4Network, ...] = tuple(host_addresses())
        self.out = sys.stdout

    def emit(self, message: dict) -> None:
        self.out.write(json.dumps(message) + "\n")
        self.out.flush()

    def rules_for(self, address: str) -> SandboxRules | None:
        name = f"{address}.json"
        if "/" in address:
            return None
        try:
            mtime = os.stat(name, dir_fd=self.rules_dir_fd).st_mtime_ns
        except OSError:
            self.rules.pop(address, None)
            return None
        cached = self.rules.get(address)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.rules_dir_fd)
            with os.fdopen(fd) as fh:
                rules = SandboxRules.from_texts(json.load(fh))
        except (OSError, ValueError):
            return None
        self.rules[address] = (mtime, rules)
        return rules

    def forbidden(self):
        return (*self.static, *self._host_nets)

    async def refresh_host_addresses(self) -> None:
        while True:
            await asyncio.sleep(HOST_ADDRESSES_REFRESH_S)
            try:
                self._host_nets = tuple(await asyncio.to_thread(host_addresses))
            except Exception as exc:  # noqa: BLE001 - keep the last known list
                self.emit({"warning": f"cannot list the node's addresses: {exc!r}"})

    async def resolve(self, name: str) -> list[str]:
        if name in self.hosts:
            return list(self.hosts[name])
        if self.resolver:
            resolver = dns.asyncresolver.Resolver(configure=False)
            host, _, port = self.resolver.partition(":")
            resolver.nameservers = [host]
            resolver.port = int(port or 53)
            resolver.lifetime = 5.0
            answer = await resolver.resolve(name, "A")
            return [r.address for r in answer]
        infos = await asyncio.get_running_loop().getaddrinfo(name, None, family=socket.AF_INET,
                                                             type=socket.SOCK_STREAM)
        return list(dict.fromkeys(info[4][0] for info in infos))

    def denied(self, addr: str, target: str, reason: str) -> None:
        self.emit({"denied": {"addr": addr, "target": target, "reason": reason}})

    async def serve(self, tcp: socket.socket, udp: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        proxy = EgressProxy(rules_for=self.rules_for, forbidden=self.forbidden, resolve=self.resolve,
                            on_denied=self.denied, proxy_port=self.config["proxy_port"],
                            max_connections_per_sandbox=self.config.get("max_connections_per_sandbox", 256))
        server = await asyncio.start_server(proxy.handle, sock=tcp, limit=256 * 1024, backlog=1024)
        await loop.create_datagram_endpoint(lambda: DnsProtocol(self.rules_for, lambda a, n: self.denied(a, n, "nxdomain")),
                                            sock=udp)
        refresher = asyncio.create_task(self.refresh_host_addresses())
        stdin = asyncio.StreamReader(limit=16 * 1024 * 1024)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
        self.emit({"ready": True})
        try:
            while await stdin.readline():
                pass
        finally:
            refresher.cancel()
            server.close()


def bind_in(path: str, proxy_port: int, dns_port: int) -> tuple[socket.socket, socket.socket]:
    """The listening sockets, made inside the egress namespace at ``path``."""
    home = netns.current_fd()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        with netns.inside(fd, home):
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind(("0.0.0.0", proxy_port))  # noqa: S104 - inside the egress namespace: only sandbox veths
            tcp.listen(1024)
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            udp.bind(("0.0.0.0", dns_port))  # noqa: S104 - as above
    finally:
        os.close(fd)
        os.close(home)
    tcp.setblocking(False)
    udp.setblocking(False)
    return tcp, udp


def drop_privileges(uid: int) -> None:
    if uid < 0 or os.getuid() != 0:
        return
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def main() -> None:
    config = json.loads(sys.argv[1])
    tcp, udp = bind_in(config["netns"], config["proxy_port"], config["dns_port"])
    service = EgressService(config)
    # Opened before dropping privileges: the state dir above it is closed to other users.
    service.rules_dir_fd = os.open(config["rules_dir"], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    drop_privileges(config.get("uid", 65534))
    asyncio.run(service.serve(tcp, udp))


if __name__ == "__main__":
    main()
