from .cache import DiskImageNotFound, EnvironmentNotFound, ImageUnavailable, LayerCache

__all__ = ["DiskImageNotFound", "EnvironmentNotFound", "ImageUnavailable", "LayerCache"]
