"""Reaching into a container's network namespace from the node-agent, for port ingress.

A sandbox's netns has no route out (network.py): the only way to its ports is a socket
*made inside* that namespace (a fresh thread enters it: namespaces.py), which stays bound to
the namespace it was created in.
The loopback interface is brought up at start (IPv4 only), so software in the sandbox can
listen on 127.0.0.1 (the namespace still has no other interface and no route: nothing leaves it).
"""

import fcntl
import socket
import struct
from collections.abc import Callable
from typing import TypeVar

from corral_node_agent.isolation.namespaces import CLONE_NEWNET, run_in

T = TypeVar("T")

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def run_in_netns(pid: int, fn: Callable[[], T]) -> T:
    """``fn()`` in the network namespace of process ``pid`` (a fresh thread, which ends)."""
    return run_in(pid, CLONE_NEWNET, fn)


def loopback_up_here() -> None:
    """Bring ``lo`` up in the calling thread's netns (idempotent)."""
    # IPv4 loopback only: without IPv6 on lo the namespace has no route at all (not even ::1).
    try:
        with open("/proc/sys/net/ipv6/conf/lo/disable_ipv6", "w") as fh:  # this thread's netns
            fh.write("1")
    except OSError:
        pass  # a kernel without IPv6
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, ifreq))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def loopback_up(pid: int) -> None:
    """Bring ``lo`` up in the netns of ``pid`` (idempotent)."""
    run_in_netns(pid, loopback_up_here)


def tcp_socket(pid: int) -> socket.socket:
    """A non-blocking TCP socket in the netns of ``pid``, to connect to 127.0.0.1 there."""
    sock = run_in_netns(pid, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    sock.setblocking(False)
    return sock
