"""The api's judgement of a sandbox's egress policy (corral_common.contracts.network has the grammar).

Beyond the grammar (checked by the request model), a policy is refused (422 naming the rule)
when it names an unknown preset or opens what no sandbox may reach: the built-in ranges,
the operator's ``network_deny_cidrs``, the sandboxes' subnet, and the platform's own
services — Redis, RabbitMQ, image-service, this api and every live node-agent, by address
and by name. The nodes' egress proxies check every connection against the same ranges (and
the node's own addresses) again, so a name that resolves somewhere forbidden later is still
refused there.
"""

import asyncio
import ipaddress
import socket
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from corral_common.contracts.network import NetworkPolicy, parse_forbidden, validate_policy
from corral_common.contracts.sandboxes import VM_BACKENDS, BackendKind
from corral_common.settings import CommonSettings
from corral_common.store.state import StateStore
from corral_common.web.errors import Unprocessable

# Platform addresses are looked up again after this long (a node joining, DNS changing).
REFRESH_S = 30.0


def _host_of(url: str) -> str:
    try:
        return urlsplit(url if "//" in url else f"//{url}").hostname or ""
    except ValueError:
        return ""


def _addresses(host: str) -> list[ipaddress.IPv4Network]:
    """``host``'s IPv4 addresses as /32s (a name is resolved; nothing when it does not)."""
    if not host:
        return []
    try:
        return [ipaddress.ip_network(host)] if ipaddress.ip_address(host).version == 4 else []
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, family=socket.AF_INET, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return [ipaddress.ip_network(info[4][0]) for info in infos]


class NetworkRules:
    """Validates a request's ``network`` against this site's presets and forbidden targets."""

    def __init__(self, settings: CommonSettings, store: StateStore | None = None, api_host: str = ""):
        self.presets = settings.network_presets
        self.allow_any = settings.network_allow_any
        self.static = (*parse_forbidden(settings.network_deny_cidrs), *parse_forbidden([settings.network_sandbox_cidr]))
        self.service_hosts = [h for h in (_host_of(settings.redis_url), _host_of(settings.amqp_url),
                                          _host_of(settings.image_service_url), api_host) if h]
        self.store = store
        self.heartbeat_timeout_s = settings.heartbeat_timeout_s
        self._platform: tuple[tuple[ipaddress.IPv4Network, ...], tuple[str, ...]] = ((), ())
        self._looked_up = 0.0

    async def _platform_targets(self) -> tuple[tuple[ipaddress.IPv4Network, ...], tuple[str, ...]]:
        if time.monotonic() - self._looked_up < REFRESH_S:
            return self._platform
        hosts = list(self.service_hosts)
        if self.store is not None:
            try:
                hosts += [_host_of(node.url) for node in await self.store.live_nodes(self.heartbeat_timeout_s)]
            except Exception:  # noqa: BLE001 - Redis down: judge with what we knew
                return self._platform
        nets = await asyncio.to_thread(lambda: [n for h in hosts for n in _addresses(h)])
        names = tuple(h.lower() for h in hosts if h and not h[0].isdigit())
        self._platform = (tuple(nets), names)
        self._looked_up = time.monotonic()
        return self._platform

    async def require(self, network: object, loc: Sequence[str | int] = ("body", "network"),
                      backend: str = BackendKind.container, guest_kit: bool = True) -> None:
        """Unprocessable (422, loc down to the rule) when ``network`` cannot be taken.
        ``guest_kit``: False for a VM booting a user disk image or a snapshot, whose guest
        Corral's init does not configure (it would have a NIC it never sets up)."""
        if not isinstance(network, NetworkPolicy):
            return
        if backend in VM_BACKENDS and not guest_kit:
            raise Unprocessable("network allowlists need a VM booted from layers (not disk_image or from_snapshot)",
                                loc=list(loc), code="unsupported_network")
        nets, names = await self._platform_targets()
        problems = validate_policy(network, self.presets, (*self.static, *nets), allow_any=self.allow_any,
                                   forbidden_names=names)
        if problems:
            where, message = problems[0]
            code = "unknown_preset" if where[0] == "presets" and message.startswith("unknown") else "forbidden_network_rule"
            raise Unprocessable(message, loc=[*loc, *where], code=code,
                                extra={"problems": [{"loc": [*loc, *w], "msg": m} for w, m in problems]})
