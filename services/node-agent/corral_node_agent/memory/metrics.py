"""Prometheus metrics of the node's memory accounting (served on the node-agent's /metrics)."""

from prometheus_client import Gauge

SANDBOX_WORKING_SET = Gauge("corral_sandbox_memory_working_set_bytes",
                            "A sandbox's cgroup memory less its inactive page cache, last sample",
                            ["node", "sandbox"])
SANDBOX_SWAP = Gauge("corral_sandbox_memory_swap_bytes", "A sandbox's memory moved out to swap (zram)",
                     ["node", "sandbox"])
SANDBOX_PEAK = Gauge("corral_sandbox_memory_peak_working_set_bytes", "Highest working set sampled since start",
                     ["node", "sandbox"])
SANDBOX_MIB_SECONDS = Gauge("corral_sandbox_memory_mib_seconds",
                            "Memory·time of a sandbox since start: working set (MiB) integrated over seconds",
                            ["node", "sandbox"])
NODE_WORKING_SET = Gauge("corral_node_memory_working_set_bytes",
                         "The node cgroup's working set (every sandbox, VM and fncall worker)", ["node"])
NODE_SWAP = Gauge("corral_node_memory_swap_bytes", "The node cgroup's memory in swap", ["node"])
NODE_PEAK = Gauge("corral_node_memory_peak_working_set_bytes", "Highest node working set sampled", ["node"])
NODE_MIB_SECONDS = Gauge("corral_node_memory_mib_seconds", "The node's memory·time since the agent started",
                         ["node"])
SAMPLE_SECONDS = Gauge("corral_memory_sample_seconds", "Time the last sampling pass over every sandbox took",
                       ["node"])
