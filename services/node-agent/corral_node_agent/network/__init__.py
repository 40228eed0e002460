"""Sandbox egress: per-sandbox network namespaces, the node's egress namespace and its
nftables table, and the egress service (DNS + proxy) that judges every connection.
The layout is described in egress.py and docs/network.md."""
