from .cache import LayerCache

__all__ = ["LayerCache"]
