"""One sandbox's rules as the egress service judges them: names for DNS and the proxy,
addresses and ports for connections to IP literals."""

import ipaddress
from dataclasses import dataclass

from corral_common.contracts.network import Rule, parse_rule


@dataclass(frozen=True)
class SandboxRules:
    rules: tuple[Rule, ...] = ()

    @classmethod
    def from_texts(cls, texts: list[str]) -> "SandboxRules":
        return cls(tuple(parse_rule(t) for t in texts))

    def knows_name(self, name: str) -> bool:
        """Whether DNS answers ``name`` (some rule names it, whatever its ports)."""
        return any(r.matches_name(name) for r in self.rules)

    def allows_name(self, name: str, port: int) -> bool:
        return any(r.matches_name(name) and r.allows_port(port) for r in self.rules)

    def allows_address(self, address: ipaddress.IPv4Address, port: int) -> bool:
        return any(r.matches_address(address) and r.allows_port(port) for r in self.rules)


NO_RULES = SandboxRules()
