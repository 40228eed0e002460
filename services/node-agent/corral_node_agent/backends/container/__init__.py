"""The crun container runtime: `ContainerBackend` and the pieces it is made of (crun calls,
OCI config, bundle layout, exec, host-side file access)."""

from corral_node_agent.backends.container.backend import ContainerBackend

__all__ = ["ContainerBackend"]
