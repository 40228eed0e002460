"""The disks a node makes for its sandboxes: ``upper`` (a sandbox's writable layer, an ext4 image of
its disk_mb, and the pool of ready ones)."""
