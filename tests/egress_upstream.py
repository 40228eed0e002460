"""A test's own "outside world" for egress tests: a network namespace with a veth to the
node's namespace and HTTP servers inside it, so a sandbox's allowed traffic has somewhere
to go that is neither loopback nor a real network. Names are mapped by the node's
``egress_hosts`` (the test's resolver); nothing here reaches beyond this machine."""

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass

from tests.polling import until_sync


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    subprocess.run(cmd, check=True, capture_output=True)


@dataclass
class Upstream:
    netns: str
    host_if: str
    address: str  # where its servers listen
    host_address: str  # the node's end of the veth (a node address: always forbidden)
    servers: list[subprocess.Popen]

    def serve(self, directory: str, port: int) -> None:
        """An HTTP file server on address:port, serving ``directory``."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.netns, sys.executable, "-m", "http.server", str(port),
                                 "--bind", self.address, "--directory", directory],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.servers.append(proc)

        def up() -> bool:
            r = subprocess.run(["ip", "netns", "exec", self.netns, sys.executable, "-c",
                                f"import socket; socket.create_connection(({self.address!r}, {port}), 1)"],
                               capture_output=True)
            return r.returncode == 0
        until_sync(up, timeout_s=15, what=f"http server on {self.address}:{port}")

    def run(self, argv: list[str], **kw) -> subprocess.Popen:
        proc = subprocess.Popen(["ip", "netns", "exec", self.netns, *argv], **kw)
        self.servers.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.servers:
            proc.kill()
            proc.wait()
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)


def make_upstream(octet: int, *, per_worker: bool = True) -> Upstream:
    """198.18.<octet>.1 in a fresh namespace, the node's end 198.18.<octet>.2 (RFC 2544
    benchmarking range: never a real destination). ``per_worker``: on xdist's second worker
    198.19.<octet>.x instead, since a module's tests (and so its module fixture) may run on
    both workers at once; only an upstream whose address the platform's settings name (the
    e2e preset's, on the one worker of the e2e group) keeps it."""
    net = "198.19" if per_worker and os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0" else "198.18"
    taken = subprocess.run(["ip", "-4", "-o", "addr", "show", "to", f"{net}.{octet}.0/30"],
                           capture_output=True, text=True, check=True).stdout
    if taken.strip():  # a second upstream on the subnet would take the route from the first
        raise RuntimeError(f"{net}.{octet}.0/30 is in use already (another test's upstream?): {taken.strip()}")
    tag = uuid.uuid4().hex[:6]
    netns, host_if = f"c14up-{tag}", f"c14h{tag}"
    _ip("netns", "add", netns)
    _ip("link", "add", host_if, "type", "veth", "peer", "name", "up0", "netns", netns)
    address, host_address = f"{net}.{octet}.1", f"{net}.{octet}.2"
    _ip("addr", "add", f"{host_address}/30", "dev", host_if)
    _ip("link", "set", host_if, "up")
    _ip("addr", "add", f"{address}/30", "dev", "up0", netns=netns)
    _ip("link", "set", "up0", "up", netns=netns)
    _ip("link", "set", "lo", "up", netns=netns)
    return Upstream(netns=netns, host_if=host_if, address=address, host_address=host_address, servers=[])



