"""The egress namespace's nftables table, through libnftables (Debian's nftables).

In-process through the library rather than the ``nft`` program: a set element added or
removed costs ~0.1 ms instead of ~5 ms for a process (HOST-NOTES). A libnftables context
talks to the kernel through a netlink socket made with it, so a context made on a thread in
the egress namespace (`Nftables` on the NetnsWorker) keeps working on that namespace from
any thread.

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

import ctypes
import json
import re
import threading

TABLE = "corral_egress"
VETH_PREFIX = "ce"  # host side of a sandbox's veth: ce<slot>
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}\Z")


# libnftables is not safe for concurrent use, not even of two contexts from two threads (its
# parser and cache keep process-wide state): a node-agent's own calls come from its one netns
# worker, but a process serving several agents (the in-process tests) aborted in
# nft_run_cmd_from_buffer. Every call into the library holds this lock; a set element costs
# ~0.1 ms, so it is never contended for long.
_LIBRARY_LOCK = threading.Lock()


class NftError(RuntimeError):
    pass


class Nftables:
    """A libnftables context (bound to the network namespace it was made in)."""

    def __init__(self, library: str = "libnftables.so.1"):
        lib = ctypes.CDLL(library, use_errno=True)
        lib.nft_ctx_new.restype = ctypes.c_void_p
        lib.nft_ctx_new.argtypes = [ctypes.c_uint32]
        lib.nft_ctx_free.argtypes = [ctypes.c_void_p]
        lib.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        for name in ("nft_ctx_buffer_output", "nft_ctx_buffer_error"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
        for name in ("nft_ctx_get_output_buffer", "nft_ctx_get_error_buffer"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
            getattr(lib, name).restype = ctypes.c_char_p
        lib.nft_ctx_output_set_flags.argtypes = [ctypes.c_void_p, ctypes.c_uint]
        self._lib = lib
        with _LIBRARY_LOCK:
            self._ctx = lib.nft_ctx_new(0)
            lib.nft_ctx_buffer_output(self._ctx)
            lib.nft_ctx_buffer_error(self._ctx)

    def run(self, commands: str, *, json_output: bool = False) -> str:
        with _LIBRARY_LOCK:
            if not self._ctx:
                raise NftError("the nftables context is closed")
            self._lib.nft_ctx_output_set_flags(self._ctx, 1 << 4 if json_output else 0)  # NFT_CTX_OUTPUT_JSON
            rc = self._lib.nft_run_cmd_from_buffer(self._ctx, commands.encode())
            out = (self._lib.nft_ctx_get_output_buffer(self._ctx) or b"").decode()
            err = (self._lib.nft_ctx_get_error_buffer(self._ctx) or b"").decode()
        if rc != 0:
            raise NftError(err.strip() or f"nft failed ({rc})")
        return out

    def close(self) -> None:
        with _LIBRARY_LOCK:
            if self._ctx:
                self._lib.nft_ctx_free(self._ctx)
                self._ctx = None


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
