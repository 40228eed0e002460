"""Where a sandbox's traffic may go, decided from its spec:

- ``network: "none"`` (the default), in every runtime: nowhere. Containers get a fresh
  network namespace from crun holding only a down ``lo``; fncall runs the same from bwrap
  ``--unshare-all``; VMs no network device at all (QEMU ``-nodefaults``, none added).
- an allowlist (containers, microvm, vm): a network namespace made by the node
  (network/egress.py), whose only way out is the node's egress service, which judges every
  DNS query and connection against the rules (network/proxy.py, dns.py). The runtimes
  render it: crun joins the namespace by path, QEMU gets a tap inside it.
"""

from dataclasses import dataclass
from typing import Literal

from corral_common.contracts.network import NetworkPolicy
from corral_common.contracts.sandboxes import SandboxSpec


@dataclass(frozen=True)
class Egress:
    mode: Literal["none", "allowlist"] = "none"
    policy: NetworkPolicy | None = None


NO_EGRESS = Egress()


def egress_for(spec: SandboxSpec) -> Egress:
    if isinstance(spec.network, NetworkPolicy):
        return Egress(mode="allowlist", policy=spec.network)
    return NO_EGRESS
