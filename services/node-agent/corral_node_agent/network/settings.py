"""The node's egress settings (docs/network.md), nested in the node's as ``egress``. The
presets and the sandboxes' subnet are deployment-wide (CORRAL_NETWORK_*, CommonSettings)."""

from pydantic import Field

from corral_node_agent.section import NodeSection, env_names


class EgressSettings(NodeSection):
    section = "egress"

    # The egress proxy's port and the resolver's port inside the node's egress namespace (every
    # TCP connection of a sandbox is redirected to the proxy, UDP 53 to the resolver).
    proxy_port: int = Field(3128, ge=1, le=65535, validation_alias=env_names("egress", "proxy_port"))
    dns_port: int = Field(53, ge=1, le=65535, validation_alias=env_names("egress", "dns_port"))
    # Names the egress proxy resolves itself, before any resolver (JSON name -> [IPv4...]), like
    # /etc/hosts: e.g. {"pypi.mirror.internal": ["10.8.0.4"]}.
    hosts: dict[str, list[str]] = Field(default_factory=dict, validation_alias=env_names("egress", "hosts"))
    # The DNS server (IP[:port]) the egress proxy resolves allowed names with. Empty: the node's
    # own resolver (getaddrinfo). Sandboxes never talk to it: they get only the node's answers.
    resolver: str = Field("", validation_alias=env_names("egress", "resolver"))
    # The uid the egress service (resolver + proxy) runs as after binding its sockets.
    uid: int = Field(65534, validation_alias=env_names("egress", "uid"))
    # Connections one sandbox may hold open through the proxy at once (beyond: refused, counted).
    max_connections: int = Field(256, ge=1, validation_alias=env_names("egress", "max_connections"))
    # Sandbox network namespaces (with their veth into the egress namespace) kept ready, made
    # by a thread of their own once the first sandbox with an allowlist was created, so that a
    # create only takes one. 0: every create makes its own (~5-8 ms).
    pool: int = Field(4, ge=0, le=64, validation_alias=env_names("egress", "pool"))
