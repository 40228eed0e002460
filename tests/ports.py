"""Every port a test server binds, in one plan, all below the kernel's ephemeral range.

An outgoing connection takes its local port from net.ipv4.ip_local_port_range (32768-60999 by
default and here): a server a test starts, stops and starts again on a port in that range may
find it held by any client socket on the host in between, and fail to start (one CI run lost a
private Redis that way). So the plan stays below it:

  21000 + 200 x worker   the e2e platform's services (tests/live_platform.py)
  24000 + 200 x worker   a platform started by hand while developing
  25672 / 26379 / 26432  the servers `make test` starts (Makefile)
  27000 + 20 x worker    the shared Redis, RabbitMQ and PostgreSQL a worker starts when none is given
  28000 + 100 x worker   servers a test of that worker may stop and restart (private())

A RabbitMQ on port P takes P..P+9 (scripts/servers.sh: epmd, distribution, its CLI tools').
"""

import os

WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
BROKER_SPAN = 10  # ports one RabbitMQ takes from its AMQP port on

SHARED_REDIS = 27000 + 20 * WORKER
SHARED_AMQP = SHARED_REDIS + 10  # .. + 9
SHARED_POSTGRES = SHARED_REDIS + 1


def private(offset: int) -> int:
    """This worker's private port at offset (0..99): 0..49 brokers (five of them), 50..59 Redis,
    60..69 PostgreSQL, 70..89 the servers-on-loopback test, 90..99 registries."""
    if not 0 <= offset < 100:
        raise ValueError(f"private port offset {offset} outside 0..99")
    return 28000 + 100 * WORKER + offset


def broker_ports(amqp_port: int) -> range:
    return range(amqp_port, amqp_port + BROKER_SPAN)


def _ephemeral_floor() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# A machine whose ephemeral range reaches down into the plan would bring the flakiness back.
if 28000 + 100 * WORKER + 100 > _ephemeral_floor():
    raise RuntimeError(f"test ports reach {28000 + 100 * WORKER + 99}, inside the ephemeral range "
                       f"(net.ipv4.ip_local_port_range starts at {_ephemeral_floor()}): lower the plan in tests/ports.py")
