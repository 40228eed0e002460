"""A running sandbox's hostname, set from the node (a sandbox started ahead for the warm pool
gets its name when it is claimed: sandboxes/warm_pool.py).

The hostname belongs to the sandbox's UTS namespace, owned by its user namespace, in which
the sandbox's processes lack CAP_SYS_ADMIN: only the node can change it.
"""

import socket

from corral_host.namespaces import CLONE_NEWUTS, run_in


def set_hostname(pid: int, name: str) -> None:
    """sethostname(name) in the UTS namespace of process ``pid``."""
    run_in(pid, CLONE_NEWUTS, lambda: socket.sethostname(name))
