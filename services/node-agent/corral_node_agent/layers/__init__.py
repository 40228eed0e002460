from .cache import EnvironmentNotFound, ImageUnavailable, LayerCache

__all__ = ["EnvironmentNotFound", "ImageUnavailable", "LayerCache"]
