"""Cgroups the node-agent creates, caps, reads and removes: `base` (the interface), one module
per cgroup version (`v1`), `detect` (which one this host gets)."""
