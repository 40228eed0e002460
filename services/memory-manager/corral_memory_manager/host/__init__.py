"""The host's memory as the kernel reports it: /proc/meminfo, KSM, DAMON, swap and zram."""
