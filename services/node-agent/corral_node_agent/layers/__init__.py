"""Image layers and disk images on this node: fetched from image-service, cached, mounted for
containers and handed to VMs as files (``cache.LayerCache`` is the entry point)."""

from corral_node_agent.layers.cache import LayerCache

__all__ = ["LayerCache"]
