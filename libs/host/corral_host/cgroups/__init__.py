"""Cgroups the node-agent creates, caps, reads and removes (and the memory-manager reads and
reclaims from): `base` (the interface), one module
per cgroup version (`v1`, `v2`), `detect` (which one this host gets), `node` (the node's tree),
`files` and `mounts` (what both drivers read)."""
