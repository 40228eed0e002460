"""A sandbox's egress policy: the request shape, the rule grammar, and what no rule may open.

``network`` in a sandbox request is ``"none"`` (the default: no network device at all) or
an allowlist ``{"allow": [rule...], "presets": [name...], "bandwidth_mbit": N}``. A rule is

- a domain: ``pypi.example.org`` (exactly that name) or ``*.example.org`` (any name below
  it, not the name itself), optionally with ports: ``git.example.org:443``;
- an IPv4 address or CIDR, optionally with ports: ``10.20.0.0/16``, ``10.20.0.5:5000``,
  ``10.20.0.0/24:80,443,8000-8100``.

No ports means any TCP port. IPv6 is closed: an IPv6 rule is refused. Presets are the
operator's (``CORRAL_NETWORK_PRESETS``: name -> rules, e.g. the site's package mirror or the
trainer's LLM gateway); Corral names no public host itself.

What no rule opens, whatever the operator allowed (`ALWAYS_FORBIDDEN` plus the addresses of
the platform's services, the node's own addresses and the sandboxes' subnet, which the
services add): a CIDR that overlaps one of them is refused when asked for (422 naming the
rule), and the node's egress proxy refuses a connection to one of them at connect time too
(a name allowed by a rule may resolve to anything).
"""

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WrapValidator, field_validator
from pydantic_core import PydanticCustomError

MAX_RULES = 256
MAX_PRESETS = 16
# IPv4 ranges no sandbox reaches: "this network", loopback, link-local (cloud metadata at
# 169.254.169.254), multicast, reserved and broadcast.
ALWAYS_FORBIDDEN = tuple(ipaddress.IPv4Network(n) for n in (
    "0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4"))
# Names that mean the machine itself, whatever a resolver says.
FORBIDDEN_NAMES = ("localhost",)

_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_DOMAIN = re.compile(rf"^(\*\.)?{_LABEL}(\.{_LABEL})*\Z")
_PORTS = re.compile(r"^\d{1,5}(-\d{1,5})?(,\d{1,5}(-\d{1,5})?)*\Z")


class RuleError(ValueError):
    """A rule that cannot be taken, and why."""


@dataclass(frozen=True)
class Rule:
    """One parsed rule: a domain pattern or an IPv4 network, and the ports it opens (empty:
    every port)."""

    text: str
    domain: str | None = None  # lowercase; a leading "*." means strictly below it
    network: ipaddress.IPv4Network | None = None
    ports: tuple[tuple[int, int], ...] = ()

    def allows_port(self, port: int) -> bool:
        return not self.ports or any(lo <= port <= hi for lo, hi in self.ports)

    def matches_name(self, name: str) -> bool:
        if self.domain is None:
            return False
        name = name.lower().rstrip(".")
        if self.domain.startswith("*."):
            return name.endswith(self.domain[1:])
        return name == self.domain

    def matches_address(self, address: ipaddress.IPv4Address) -> bool:
        return self.network is not None and address in self.network


def _parse_ports(text: str, rule: str) -> tuple[tuple[int, int], ...]:
    if not _PORTS.match(text):
        raise RuleError(f"{rule!r}: ports must be N, N-M or a comma list of them")
    ports = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        lo_n, hi_n = int(lo), int(hi or lo)
        if not 1 <= lo_n <= hi_n <= 65535:
            raise RuleError(f"{rule!r}: ports must lie in 1..65535, low to high")
        ports.append((lo_n, hi_n))
    return tuple(ports)


def parse_rule(text: str) -> Rule:
    """The rule ``text`` means (RuleError: malformed). Says nothing about forbidden ranges."""
    if not isinstance(text, str) or not text or len(text) > 300:
        raise RuleError("a rule is a non-empty string of at most 300 characters")
    raw = text.strip().lower()
    if raw.startswith("[") or raw.count(":") > 1:
        raise RuleError(f"{text!r}: IPv6 is closed to sandboxes")
    target, sep, port_text = raw.partition(":")
    ports = _parse_ports(port_text, text) if sep else ()
    if re.match(r"^[0-9./]+\Z", target):
        try:
            network = ipaddress.IPv4Network(target, strict=True)
        except ValueError as exc:
            raise RuleError(f"{text!r} is not an IPv4 address or CIDR ({exc})") from None
        return Rule(text=text, network=network, ports=ports)
    if len(target) > 253 or not _DOMAIN.match(target):
        raise RuleError(f"{text!r} is not a domain (letters, digits and '-' per label, '*.' only in front), "
                        f"an IPv4 address or a CIDR")
    if target.lstrip("*.").split(".")[-1].isdigit():
        raise RuleError(f"{text!r}: a domain's last label is not a number")
    bare = target.removeprefix("*.")
    if bare in FORBIDDEN_NAMES or bare.endswith(".localhost"):
        raise RuleError(f"{text!r} names the machine itself")
    return Rule(text=text, domain=target, ports=ports)


def parse_forbidden(cidrs: Iterable[str]) -> tuple[ipaddress.IPv4Network, ...]:
    """Operator-given networks (IPv4 ones; IPv6 is closed anyway)."""
    nets = []
    for cidr in cidrs:
        net = ipaddress.ip_network(cidr, strict=False)
        if isinstance(net, ipaddress.IPv4Network):
            nets.append(net)
    return tuple(nets)


def check_allowed(rule: Rule, forbidden: Iterable[ipaddress.IPv4Network], *, allow_any: bool = False,
                  forbidden_names: Iterable[str] = ()) -> None:
    """RuleError when ``rule`` would open something no sandbox may reach. ``allow_any`` (an
    operator choice) lets a CIDR span forbidden ranges (0.0.0.0/0): the proxy still refuses
    them at connect time; a CIDR inside a forbidden range is refused either way."""
    if rule.network is not None:
        if rule.network.prefixlen < 8 and not allow_any:
            raise RuleError(f"{rule.text!r} is wider than a /8: this site does not allow that")
        for net in (*ALWAYS_FORBIDDEN, *forbidden):
            if rule.network.subnet_of(net) or (not allow_any and rule.network.overlaps(net)):
                raise RuleError(f"{rule.text!r} covers {net}, which sandboxes never reach")
    elif rule.domain is not None:
        for name in forbidden_names:
            if rule.matches_name(name):
                raise RuleError(f"{rule.text!r} names a service of the platform")


def is_forbidden(address: ipaddress.IPv4Address | ipaddress.IPv6Address,
                 forbidden: Iterable[ipaddress.IPv4Network]) -> bool:
    """Whether a connection to ``address`` must be refused (every IPv6 address is)."""
    if not isinstance(address, ipaddress.IPv4Address):
        mapped = getattr(address, "ipv4_mapped", None)
        if mapped is None:
            return True
        address = mapped
    return any(address in net for net in (*ALWAYS_FORBIDDEN, *forbidden))


def _valid_rule(text: str) -> str:
    try:
        parse_rule(text)
    except RuleError as exc:
        raise PydanticCustomError("invalid_network_rule", str(exc)) from None
    return text


class NetworkPolicy(BaseModel):
    """An allowlist: everything else stays closed (DNS answers NXDOMAIN, connections are refused)."""

    model_config = ConfigDict(extra="forbid")

    allow: list[Annotated[str, AfterValidator(_valid_rule)]] = Field(default_factory=list, max_length=MAX_RULES,
                             description="Rules: 'host.example', '*.example' (below it), "
                                         "'10.0.0.0/24' or '10.0.0.5', each optionally ':443' or ':80,8000-8100'")
    presets: list[str] = Field(default_factory=list, max_length=MAX_PRESETS,
                               description="Names of the operator's presets (CORRAL_NETWORK_PRESETS)")
    bandwidth_mbit: int | None = Field(None, ge=1, le=100_000, description="Cap on each direction, in Mbit/s")

    @field_validator("presets")
    @classmethod
    def _preset_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.match(r"^[a-z0-9][a-z0-9_.-]{0,63}\Z", name):
                raise ValueError(f"{name!r} is not a preset name")
        return value


def _network(value: Any, handler: Any) -> Any:
    # Not a plain union: its errors would carry the member's name in loc ("network",
    # "NetworkPolicy", "allow"); this way they say ("network", "allow", 0).
    if value == "none" or isinstance(value, NetworkPolicy):
        return value
    if not isinstance(value, dict):
        raise PydanticCustomError("invalid_network", "network is 'none' or an allowlist object "
                                                     "{allow, presets, bandwidth_mbit}")
    return NetworkPolicy.model_validate(value)


# (The allowlist first: the SDK generator tries union members in order, and gives up after a
# literal that does not match.)
Network = Annotated[NetworkPolicy | Literal["none"], WrapValidator(_network)]


def expand(policy: NetworkPolicy, presets: Mapping[str, list[str]]) -> list[Rule]:
    """The rules of ``policy`` with its presets' rules (KeyError: an unknown preset)."""
    texts = list(policy.allow)
    for name in policy.presets:
        texts.extend(presets[name])
    seen: dict[str, Rule] = {}
    for text in texts:
        seen.setdefault(text.strip().lower(), parse_rule(text))
    return list(seen.values())


def validate_policy(policy: NetworkPolicy, presets: Mapping[str, list[str]],
                    forbidden: Iterable[ipaddress.IPv4Network], *, allow_any: bool = False,
                    forbidden_names: Iterable[str] = ()) -> list[tuple[list[str | int], str]]:
    """Every problem of ``policy`` as (loc below ``network``, message); empty when it can be taken."""
    problems: list[tuple[list[str | int], str]] = []
    forbidden = tuple(forbidden)
    names = tuple(forbidden_names)
    for i, text in enumerate(policy.allow):
        try:
            check_allowed(parse_rule(text), forbidden, allow_any=allow_any, forbidden_names=names)
        except RuleError as exc:
            problems.append((["allow", i], str(exc)))
    for i, name in enumerate(policy.presets):
        if name not in presets:
            known = ", ".join(sorted(presets)) or "none are defined"
            problems.append((["presets", i], f"unknown preset {name!r} (this site's: {known})"))
            continue
        for text in presets[name]:  # the operator's, but the same ranges stay closed
            try:
                check_allowed(parse_rule(text), forbidden, allow_any=allow_any, forbidden_names=names)
            except RuleError as exc:
                problems.append((["presets", i], f"preset {name!r}: {exc}"))
    return problems
