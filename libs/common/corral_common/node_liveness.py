"""What a node's liveness means, shared by the agent that shows it and the reaper that judges it.

A node is live while its score in ``nodes`` is fresh (its full heartbeat or its liveness pulse
set it). A whole agent process can stall beyond both: direct reclaim on a host near its memory
limit stops every thread of it for tens of seconds (the 10,000-sandbox density run saw 17-44 s),
the pulse's thread too. Reaping it then fails thousands of sandboxes that still run. So before
the reaper gives a node up it asks the node's kernel: a process that is alive but stalled still
has its listening socket, and the kernel completes a TCP handshake into its backlog without the
process running; a dead agent's port refuses, a dead host's times out. A node that answers so is
given the wedge budget, counted from its last beat, before it is reaped anyway (alive but
stuck for good is as useless as dead).
"""

import asyncio
import contextlib
from urllib.parse import urlsplit

# The wedge budget, in heartbeat timeouts (a minute by default). Long enough for the slowest
# stall seen (the density runs: a full beat more than one 10 s timeout late, a whole process
# 44 s), short enough that an agent stuck for good gets its node reaped: it answers no exec and
# stops nothing, and no new sandbox goes to it meanwhile (reserve refuses a node whose full beat
# is older than the timeout).
WEDGE_TIMEOUTS = 6


async def accepts_connections(url: str, timeout_s: float) -> bool:
    """Whether the host and port of ``url`` complete a TCP handshake within ``timeout_s``
    (nothing is sent: the process behind it need not run for the kernel to accept)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return False
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, port), timeout_s)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
