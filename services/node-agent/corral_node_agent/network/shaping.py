"""Bandwidth caps with tc: a token bucket (tbf) on each end of a sandbox's veth.

On the egress side the qdisc shapes what the sandbox downloads; on the sandbox's eth0 (in
its namespace, which its root has no capability over) what it uploads. This kernel has no
tc police / matchall / fq_codel (HOST-NOTES): tbf is what works, and held a 10 Mbit/s cap at
9.5-9.6.
"""

import contextlib

from corral_host import netns


def _tbf(ipr, index: int, mbit: int | None) -> None:
    with contextlib.suppress(Exception):  # no qdisc of ours yet
        ipr.tc("del", index=index, handle="root", root=True)
    if mbit:
        rate = mbit * 1_000_000 // 8  # bytes/s
        burst = max(rate // 100, 16 * 1024)  # 10 ms of traffic, at least a few packets
        ipr.tc("add", "tbf", index=index, handle="1:", rate=rate, burst=burst, latency=50_000)


def limit(ipr, slot, mbit: int | None) -> None:
    """Worker thread (`ipr` in the egress namespace): cap both directions at ``mbit`` (None: no cap)."""
    from pyroute2 import IPRoute

    _tbf(ipr, ipr.link_lookup(ifname=slot.ifname)[0], mbit)
    home = netns.current_fd()
    fd = netns.os.open(slot.netns_path, netns.os.O_RDONLY | netns.os.O_CLOEXEC)
    try:
        with netns.inside(fd, home), IPRoute() as inner:
            _tbf(inner, inner.link_lookup(ifname="eth0")[0], mbit)
    finally:
        netns.os.close(fd)
        netns.os.close(home)
