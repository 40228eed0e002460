"""Lazy loading of layers: a FUSE file per layer whose chunks are fetched on first read."""
