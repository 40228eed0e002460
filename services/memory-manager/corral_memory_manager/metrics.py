"""Prometheus metrics of the memory-manager (default registry, served on its /metrics)."""

from prometheus_client import Counter, Gauge, Histogram

RECLAIMS = Counter("corral_memory_reclaims_total", "Sandboxes whose cold memory was paged out, by why",
                   ["node", "reason"])  # reason: paused | idle
RECLAIMED_BYTES = Counter("corral_memory_reclaimed_bytes_total",
                          "Working set a reclaim moved out (to zram, or dropped clean page cache)", ["node"])
RECLAIM_SECONDS = Histogram("corral_memory_reclaim_seconds", "Time one sandbox's reclaim took", ["node"],
                            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
PASS_SECONDS = Gauge("corral_memory_reclaim_pass_seconds", "Time the last reclaim pass took (scan included)",
                     ["node"])
CANDIDATES = Gauge("corral_memory_reclaim_candidates", "Idle or paused sandboxes seen at the last pass", ["node"])
SWAP_USED = Gauge("corral_memory_swap_used_bytes", "Swap in use on the host (/proc/swaps)", ["node"])
BALLOON_SETS = Counter("corral_memory_balloon_sets_total", "Balloon targets sent to VMs, by direction",
                       ["node", "direction"])
BALLOON_ACTUAL = Gauge("corral_memory_balloon_actual_bytes", "RAM a VM's guest has (its balloon deflated by)",
                       ["node", "sandbox"])
GUEST_RECLAIMS = Counter("corral_memory_guest_cache_drops_total",
                         "Idle guests asked (through the guest agent) to drop their page cache and compact", ["node"])
