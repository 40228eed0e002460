"""A node's egress: the network namespaces of sandboxes with an allowlist, and what judges
their traffic.

Layout (one agent = one node; two agents on a host have one each, and addresses may repeat
between them since nothing is shared):

    sandbox netns (one per sandbox)       egress netns (one per node)            node netns
    ┌──────────────────────────┐ veth  ┌───────────────────────────────┐
    │ eth0 100.96.0.(2i+1)/31  ├───────┤ ce<i> 100.96.0.(2i)/31        │
    │ lo; default via 2i       │       │ nft table inet corral_egress  │
    │ (VMs: a tap + bridge     │       │ (nft.py): all TCP -> proxy,   │  upstream sockets of the
    │  here, the same rules)   │       │ UDP 53 -> resolver, nothing   │  egress service (uid nobody),
    └──────────────────────────┘       │ routed, IPv6 dropped          │  forbidden targets refused
                                       │ listening sockets of the      ├─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─►
                                       │ egress service (egress_main)  │
                                       └───────────────────────────────┘

- Both namespaces are made by the agent (host root): a sandbox's root is root only of its own
  user namespace, so it holds no capability over its network namespace — it cannot change
  its address, routes, qdiscs or rules, and has no raw sockets.
- The sandbox netns is a file, ``{state_dir}/netns/slot-<i>``, that crun joins
  (``{"type": "network", "path": ...}``) and QEMU runs in. Slots are made ahead by the
  NetnsWorker thread (``egress_pool``), so a create only takes one (nft element + rules:
  ~0.3 ms).
- The egress namespace has no route anywhere and forwarding off: the only way out is the
  egress service, a process of its own whose listening sockets were made inside the egress
  namespace and whose upstream connections are made in the node's (egress_main.py).
- Sandboxes with ``network: "none"`` get none of this: crun makes them an empty namespace
  (lo only) and VMs have no NIC. The egress namespace and the service are only started by
  the first sandbox with an allowlist.
- Issue 12's port ingress will add its listeners to the egress namespace too (forwarding to
  a sandbox's eth0 address through the same veth), never to the sandbox namespace.
"""

import asyncio
import contextlib
import fcntl
import ipaddress
import json
import os
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import Counter

from corral_common.contracts.network import NetworkPolicy, expand, parse_forbidden
from corral_common.logging import get_logger
from corral_host import netns
from corral_node_agent.errors import BadInput, StartFailed, Unavailable
from corral_node_agent.network import nft, shaping
from corral_node_agent.settings import NodeAgentSettings

log = get_logger(__name__)
DENIED = Counter("corral_egress_denied_total", "Connections and DNS queries of sandboxes refused by egress rules",
                 ["node", "kind"])
SERVICE_READY_TIMEOUT_S = 30.0
ACK_TIMEOUT_S = 10.0
REFILL_DELAY_S = 0.25
COUNTERS_REFRESH_S = 2.0
RECENT_DENIALS = 32
TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000


@dataclass(frozen=True)
class Slot:
    """One sandbox network namespace with its veth pair, addressed and up."""

    index: int
    netns_path: str
    address: str  # the sandbox's eth0
    gateway: str  # the egress side (the proxy and resolver, for this sandbox)

    @property
    def ifname(self) -> str:
        return f"{nft.VETH_PREFIX}{self.index}"


@dataclass
class Attached:
    slot: Slot
    rules: list[str]
    bandwidth_mbit: int | None
    denied: int = 0
    last: dict[str, int] = field(default_factory=dict)
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_DENIALS))  # (epoch s, target, reason)


def _write_sysctl(path: str, value: str) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(value)
    except OSError:
        pass  # no IPv6 in this kernel: nothing to switch off


def _no_ipv6() -> None:
    """IPv6 off in the calling thread's namespace (and the nft table drops it anyway)."""
    for which in ("all", "default"):
        _write_sysctl(f"/proc/sys/net/ipv6/conf/{which}/disable_ipv6", "1")


class NodeEgress:
    """The egress namespace, its nft table, the egress service, and the sandbox slots."""

    def __init__(self, settings: NodeAgentSettings, forbidden_hosts: list[str] | None = None):
        self.settings = settings
        self.key = os.path.abspath(settings.state_dir)
        self.dir = f"{self.key}/netns"
        self.subnet = ipaddress.IPv4Network(settings.network_sandbox_cidr)
        self.presets = settings.network_presets
        self.max_slots = min(self.subnet.num_addresses // 2, 32768)
        self.egress = settings.egress  # this package's own section
        self.pool_size = self.egress.pool
        self.on_denied: Callable[[str, str, str], None] | None = None  # (sandbox id, target, reason)
        self._forbidden_hosts = forbidden_hosts or []
        self._worker: netns.NetnsWorker | None = None
        self._egress_fd = -1
        self._ipr = None  # pyroute2 IPRoute in the egress namespace (worker thread only)
        self._nft: nft.Nftables | None = None
        self._service: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None
        self.rules_dir = f"{self.dir}/rules"
        self._start_lock = asyncio.Lock()
        self._free = list(range(self.max_slots - 1, -1, -1))
        self._pool: list[Slot] = []
        self._refill: asyncio.Task | None = None
        self._attached: dict[str, Attached] = {}
        self._counting: asyncio.Task | None = None
        self._by_address: dict[str, str] = {}

    # ---- the egress namespace and service ----------------------------------------------

    @property
    def started(self) -> bool:
        return self._service is not None and self._service.returncode is None

    async def start(self) -> None:
        async with self._start_lock:
            if self.started:
                return
            if self._worker is None:
                self._worker = netns.NetnsWorker()
                await asyncio.wrap_future(self._worker.submit(self._make_egress_netns))
            await self._start_service()

    def _make_egress_netns(self) -> None:
        from pyroute2 import IPRoute

        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        os.makedirs(self.rules_dir, mode=0o755, exist_ok=True)
        for name in os.listdir(self.rules_dir):  # a previous run's: none of its sandboxes is ours
            os.unlink(f"{self.rules_dir}/{name}")
        path = f"{self.dir}/egress"
        netns.unbind(path)
        netns.unshare()
        netns.bind(path)
        self._egress_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        _no_ipv6()
        self._ipr = IPRoute()
        self._ipr.link("set", index=self._ipr.link_lookup(ifname="lo")[0], state="up")
        self._nft = nft.Nftables(path)
        self._nft.run(nft.ruleset(proxy_port=self.egress.proxy_port, dns_port=self.egress.dns_port))

    def _forbidden(self) -> list[str]:
        nets = [str(self.subnet), *self.settings.network_deny_cidrs]
        for host in self._forbidden_hosts:
            try:
                nets += [f"{info[4][0]}/32" for info in socket.getaddrinfo(host, None, family=socket.AF_INET)]
            except OSError:
                pass
        return [str(n) for n in parse_forbidden(nets)]

    async def _start_service(self) -> None:
        config = {"netns": f"{self.dir}/egress", "rules_dir": self.rules_dir, "proxy_port": self.egress.proxy_port,
                  "dns_port": self.egress.dns_port, "forbidden": await asyncio.to_thread(self._forbidden),
                  "hosts": self.egress.hosts, "resolver": self.egress.resolver,
                  "uid": self.egress.uid, "max_connections_per_sandbox": self.egress.max_connections}
        self._service = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "corral_node_agent.network.egress_main", json.dumps(config),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 20)

        ready = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read_service(self._service, ready))
        try:
            await asyncio.wait_for(asyncio.shield(ready), SERVICE_READY_TIMEOUT_S)
        except (TimeoutError, EOFError) as exc:
            raise Unavailable(f"the egress service did not start: {exc!r}") from None
        log.info("egress.started", netns=config["netns"], pid=self._service.pid)

    async def _read_service(self, proc: asyncio.subprocess.Process, ready: asyncio.Future) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "denied" in msg:
                self._denied(msg["denied"])
            elif msg.get("ready") and not ready.done():
                ready.set_result(None)
        if not ready.done():
            ready.set_exception(EOFError("the egress service exited"))
        log.warning("egress.service_exited", rc=await proc.wait())

    def _denied(self, info: dict) -> None:
        sandbox_id = self._by_address.get(info.get("addr", ""))
        if sandbox_id is None:
            return
        att = self._attached[sandbox_id]
        att.denied += 1
        att.recent.append((time.time(), info.get("target", "?"), info.get("reason", "")))
        DENIED.labels(node=self.settings.node_id, kind="dns" if str(info.get("target", "")).startswith("dns:")
                      else "connection").inc()
        if self.on_denied is not None:
            self.on_denied(sandbox_id, info.get("target", "?"), info.get("reason", ""))

    def _write_rules(self, address: str, rules: list[str] | None) -> None:
        """The sandbox's rules where the service reads them (None: it has none any more).
        Written whole and renamed into place: the service sees the old set or the new one, at
        its next connection or query (it checks the file's mtime every time)."""
        path = f"{self.rules_dir}/{address}.json"
        if rules is None:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            return
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            json.dump(rules, fh)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)

    # ---- slots -------------------------------------------------------------------------

    def _addresses(self, index: int) -> tuple[str, str]:
        base = int(self.subnet.network_address) + 2 * index
        return str(ipaddress.IPv4Address(base + 1)), str(ipaddress.IPv4Address(base))

    def _make_slot(self, index: int) -> Slot:
        """Worker thread: a fresh namespace with eth0 <-> ce<index>, addressed and up."""
        from pyroute2 import IPRoute

        address, gateway = self._addresses(index)
        slot = Slot(index=index, netns_path=f"{self.dir}/slot-{index}", address=address, gateway=gateway)
        netns.unbind(slot.netns_path)
        with contextlib.suppress(Exception):  # none: the usual case
            self._ipr.link("del", ifname=slot.ifname)  # a leftover of a crashed run
        netns.unshare()
        netns.bind(slot.netns_path)
        _no_ipv6()
        with IPRoute() as ipr:
            ipr.link("add", ifname="eth0", kind="veth", peer={"ifname": slot.ifname, "net_ns_fd": self._egress_fd})
            eth0 = ipr.link_lookup(ifname="eth0")[0]
            ipr.addr("add", index=eth0, address=address, prefixlen=31)
            ipr.link("set", index=eth0, state="up")
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
            ipr.route("add", gateway=gateway)
        netns.enter(self._worker.home)
        peer = self._ipr.link_lookup(ifname=slot.ifname)[0]
        self._ipr.addr("add", index=peer, address=gateway, prefixlen=31)
        self._ipr.link("set", index=peer, state="up")
        return slot

    def _drop_slot(self, slot: Slot) -> None:
        """Worker thread: the veth pair and the namespace file go (the namespace itself ends
        with the last process in it)."""
        nft.remove_sandbox(self._nft, slot.ifname, slot.address)
        with contextlib.suppress(Exception):  # already gone with its namespace
            self._ipr.link("del", ifname=slot.ifname)
        netns.unbind(slot.netns_path)

    async def _take_slot(self) -> Slot:
        if self._pool:
            slot = self._pool.pop()
        else:
            if not self._free:
                raise Unavailable("no free sandbox network slot on this node")
            index = self._free.pop()
            try:
                slot = await asyncio.wrap_future(self._worker.submit(self._make_slot, index))
            except BaseException:
                self._free.append(index)
                raise
        self._schedule_refill()
        return slot

    def _schedule_refill(self) -> None:
        if self.pool_size and (self._refill is None or self._refill.done()):
            self._refill = asyncio.create_task(self._fill_pool())

    async def _fill_pool(self) -> None:
        # Not while the create that took a slot is still being made (it would share the CPU).
        await asyncio.sleep(REFILL_DELAY_S)
        while len(self._pool) < self.pool_size and self._free:
            index = self._free.pop()
            try:
                self._pool.append(await asyncio.wrap_future(self._worker.submit(self._make_slot, index)))
            except Exception:  # noqa: BLE001 - the next create makes its own
                self._free.append(index)
                log.exception("egress.pool_fill_failed")
                return

    # ---- sandboxes ---------------------------------------------------------------------

    def rules_of(self, policy: NetworkPolicy, error: type[Exception] = StartFailed) -> list[str]:
        try:
            return [r.text for r in expand(policy, self.presets)]
        except KeyError as exc:
            raise error(f"unknown network preset {exc.args[0]!r} on this node") from None

    async def attach(self, sandbox_id: str, policy: NetworkPolicy) -> Slot:
        """A ready namespace for the sandbox, its rules in force before anything runs in it."""
        rules = self.rules_of(policy)
        await self.start()
        slot = await self._take_slot()
        att = Attached(slot=slot, rules=rules, bandwidth_mbit=policy.bandwidth_mbit)
        self._attached[sandbox_id] = att
        self._by_address[slot.address] = sandbox_id
        try:
            self._write_rules(slot.address, rules)
            await asyncio.wrap_future(self._worker.submit(self._admit, att))
        except BaseException:
            await self.detach(sandbox_id)
            raise
        if self._counting is None or self._counting.done():
            self._counting = asyncio.create_task(self._refresh_counters())
        return slot

    async def tap(self, sandbox_id: str) -> int:
        """For a VM: turn the sandbox's namespace into a bridge of its veth and a new tap, and
        return the tap's fd for QEMU (the guest takes eth0's address: the same rules apply to
        its frames). The tap goes when the last holder of the fd closes it."""
        att = self._attached[sandbox_id]
        return await asyncio.wrap_future(self._worker.submit(self._make_tap, att.slot))

    def _make_tap(self, slot: Slot) -> int:
        from pyroute2 import IPRoute

        fd = os.open(slot.netns_path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            netns.enter(fd)
        finally:
            os.close(fd)
        tun = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.ioctl(tun, TUNSETIFF, struct.pack("16sH", b"tap0", IFF_TAP | IFF_NO_PI))
            with IPRoute() as ipr:
                eth0 = ipr.link_lookup(ifname="eth0")[0]
                ipr.addr("del", index=eth0, address=slot.address, prefixlen=31)
                ipr.link("add", ifname="br0", kind="bridge")
                br0 = ipr.link_lookup(ifname="br0")[0]
                for name in ("eth0", "tap0"):
                    ipr.link("set", index=ipr.link_lookup(ifname=name)[0], master=br0, state="up")
                ipr.link("set", index=br0, state="up")
        except BaseException:
            os.close(tun)
            raise
        return tun

    def _admit(self, att: Attached) -> None:
        nft.add_sandbox(self._nft, att.slot.ifname, att.slot.address)
        if att.bandwidth_mbit:
            shaping.limit(self._ipr, att.slot, att.bandwidth_mbit)

    async def update(self, sandbox_id: str, policy: NetworkPolicy) -> None:
        """New rules for a running sandbox: in force when this returns (open connections stay)."""
        att = self._attached.get(sandbox_id)
        if att is None:
            raise KeyError(sandbox_id)
        rules = self.rules_of(policy, BadInput)
        self._write_rules(att.slot.address, rules)
        att.rules = rules
        if policy.bandwidth_mbit != att.bandwidth_mbit:
            att.bandwidth_mbit = policy.bandwidth_mbit
            await asyncio.wrap_future(self._worker.submit(shaping.limit, self._ipr, att.slot, policy.bandwidth_mbit))

    async def detach(self, sandbox_id: str) -> dict[str, int]:
        """Take the sandbox's namespace apart; its final counters."""
        if sandbox_id not in self._attached:
            return {}
        try:
            final = await self.counters(sandbox_id)
        except Exception:  # noqa: BLE001 - the worker is gone (agent shutdown)
            final = self.last_counters(sandbox_id)
        att = self._attached.pop(sandbox_id, None)
        if att is None:
            return final
        self._by_address.pop(att.slot.address, None)
        self._write_rules(att.slot.address, None)
        await asyncio.wrap_future(self._worker.submit(self._drop_slot, att.slot))
        self._free.append(att.slot.index)
        return final

    def is_attached(self, sandbox_id: str) -> bool:
        return sandbox_id in self._attached

    async def counters(self, sandbox_id: str) -> dict[str, int]:
        """Bytes the sandbox sent (tx) and received (rx), and connections refused."""
        att = self._attached.get(sandbox_id)
        if att is None:
            return {}
        stats = await asyncio.wrap_future(self._worker.submit(self._link_stats, att.slot))
        if stats:
            att.last = stats
        return {**att.last, "denied": att.denied}

    def recent_denials(self, sandbox_id: str) -> list[tuple[float, str, str]]:
        att = self._attached.get(sandbox_id)
        return list(att.recent) if att is not None else []

    def last_counters(self, sandbox_id: str) -> dict[str, int]:
        """What `counters` last read (refreshed every COUNTERS_REFRESH_S while attached)."""
        att = self._attached.get(sandbox_id)
        return {**att.last, "denied": att.denied} if att is not None else {}

    async def _refresh_counters(self) -> None:
        while self._attached:
            for sandbox_id in list(self._attached):
                with contextlib.suppress(Exception):  # detached meanwhile
                    await self.counters(sandbox_id)
            await asyncio.sleep(COUNTERS_REFRESH_S)

    def _link_stats(self, slot: Slot) -> dict[str, int]:
        try:
            link = self._ipr.link("get", ifname=slot.ifname)[0]
        except Exception:  # noqa: BLE001 - gone with its namespace
            return {}
        stats = link.get_attr("IFLA_STATS64") or {}
        # The egress side's rx is what the sandbox sent.
        return {"tx_bytes": int(stats.get("rx_bytes", 0)), "rx_bytes": int(stats.get("tx_bytes", 0))}

    async def close(self) -> None:
        """Everything down (idempotent); the next `node_egress` of this node makes a new one."""
        if _NODE_EGRESS.get(self.key) is self:
            forget(self.settings)
        for sid in list(self._attached):
            await self.detach(sid)
        for task in (self._refill, self._counting):
            if task is not None:
                task.cancel()
        if self._worker is not None:
            for slot in self._pool:
                await asyncio.wrap_future(self._worker.submit(self._drop_slot, slot))
            self._pool.clear()
        if self._service is not None and self._service.returncode is None:
            assert self._service.stdin is not None
            self._service.stdin.close()
            try:
                await asyncio.wait_for(self._service.wait(), 5)
            except TimeoutError:
                self._service.kill()
                await self._service.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._worker is not None:
            await asyncio.wrap_future(self._worker.submit(self._close_egress))
            self._worker.close()
            self._worker = None

    def _close_egress(self) -> None:
        if self._nft is not None:
            self._nft.close()
            self._nft = None
        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None
        if self._egress_fd >= 0:
            os.close(self._egress_fd)
            self._egress_fd = -1
        netns.unbind(f"{self.dir}/egress")


_NODE_EGRESS: dict[str, NodeEgress] = {}


def node_egress(settings: NodeAgentSettings) -> NodeEgress:
    """The one NodeEgress of a node (its backends share it), made on first use."""
    key = os.path.abspath(settings.state_dir)
    if key not in _NODE_EGRESS:
        from urllib.parse import urlsplit

        hosts = [urlsplit(u).hostname or "" for u in (settings.redis_url, settings.amqp_url, settings.image_service_url)]
        _NODE_EGRESS[key] = NodeEgress(settings, forbidden_hosts=[h for h in hosts if h])
    return _NODE_EGRESS[key]


def forget(settings: NodeAgentSettings) -> None:
    _NODE_EGRESS.pop(os.path.abspath(settings.state_dir), None)


