"""The egress namespace's nftables table, through Debian's ``nft`` program.

A process per change, not libnftables in the agent: the library keeps process-wide state
(parser, cache) and aborts on errors it does not expect, and an abort took the whole
node-agent with it (CI, 2026-12-02: ``Fatal Python error: Aborted`` in
nft_run_cmd_from_buffer while making the egress namespace's table, under the process-wide
lock that was meant to prevent it). A failed ``nft`` is one refused change; the process costs
~5 ms instead of ~0.1 ms (HOST-NOTES), once per attach and detach of an allowlist sandbox.
It runs in the egress namespace through ``nsenter --net``, whatever thread asks.

The table (`ruleset`), one for every sandbox of the node, a sandbox being one element of
the set ``sandboxes`` (its veth's name . its address):
- prerouting (raw): IPv6 dropped; a packet from a sandbox veth whose (interface, source)
  is not an element is dropped (no spoofing another sandbox's address);
- prerouting (dstnat): every TCP connection from a sandbox, to whatever address and port,
  is redirected to the egress proxy (which reads the original destination), and UDP to
  port 53 to the resolver;
- input: from sandbox veths only the resolver (UDP 53) and the proxy port; nothing else
  reaches the namespace's own addresses;
- forward: policy drop, and forwarding stays off in the namespace: nothing is routed, every
  byte a sandbox sends out goes through the proxy, whose upstream sockets live in the
  node's namespace and refuse forbidden addresses (proxy.py).
"""

import json
import re
import subprocess

TABLE = "corral_egress"
VETH_PREFIX = "ce"  # host side of a sandbox's veth: ce<slot>
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}\Z")
NFT_TIMEOUT_S = 30.0


class NftError(RuntimeError):
    pass


class Nftables:
    """``nft`` commands in the network namespace bound at ``netns_path``."""

    def __init__(self, netns_path: str):
        self.netns_path = netns_path
        self.closed = False

    def run(self, commands: str, *, json_output: bool = False) -> str:
        if self.closed:
            raise NftError("the nftables context is closed")
        argv = ["nsenter", f"--net={self.netns_path}", "nft", *(["--json"] if json_output else []), "-f", "-"]
        try:
            done = subprocess.run(argv, input=commands, capture_output=True, text=True, timeout=NFT_TIMEOUT_S,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise NftError(f"nft could not run: {exc}") from None
        if done.returncode != 0:
            raise NftError(done.stderr.strip() or f"nft failed ({done.returncode})")
        return done.stdout

    def close(self) -> None:
        self.closed = True


def ruleset(*, proxy_port: int, dns_port: int = 53) -> str:
    p = VETH_PREFIX
    return f"""
table inet {TABLE}
delete table inet {TABLE}
table inet {TABLE} {{
  set sandboxes {{ type ifname . ipv4_addr; }}
  counter refused {{ }}
  chain prerouting_raw {{
    type filter hook prerouting priority raw; policy accept;
    meta nfproto ipv6 drop
    iifname "{p}*" iifname . ip saddr != @sandboxes counter name refused drop
  }}
  chain prerouting_nat {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname "{p}*" meta l4proto tcp redirect to :{proxy_port}
    iifname "{p}*" udp dport 53 redirect to :{dns_port}
  }}
  chain input {{
    type filter hook input priority filter; policy drop;
    iifname "lo" accept
    ct state established,related accept
    iifname "{p}*" udp dport {dns_port} accept
    iifname "{p}*" tcp dport {proxy_port} accept
    counter name refused
  }}
  chain forward {{
    type filter hook forward priority filter; policy drop;
    counter name refused
  }}
}}
"""


def _element(ifname: str, address: str) -> str:
    if not _IFNAME.match(ifname):
        raise ValueError(f"bad interface name {ifname!r}")
    return f'{{ "{ifname}" . {address} }}'


def add_sandbox(nft: Nftables, ifname: str, address: str) -> None:
    nft.run(f"add element inet {TABLE} sandboxes {_element(ifname, address)}")


def remove_sandbox(nft: Nftables, ifname: str, address: str) -> None:
    try:
        nft.run(f"delete element inet {TABLE} sandboxes {_element(ifname, address)}")
    except NftError:
        pass  # not there (a half-built attach)


def sandboxes(nft: Nftables) -> list[tuple[str, str]]:
    data = json.loads(nft.run(f"list set inet {TABLE} sandboxes", json_output=True))
    found = []
    for item in data.get("nftables", []):
        for elem in item.get("set", {}).get("elem", []) or []:
            concat = elem.get("concat") if isinstance(elem, dict) else None
            if concat:
                found.append((concat[0], concat[1]))
    return found
