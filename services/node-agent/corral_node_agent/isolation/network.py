"""Where a sandbox's traffic may go. Today nowhere, in every runtime:
- containers: a fresh network namespace, holding only a down ``lo`` (config.json);
- fncall runs: the same, from bwrap ``--unshare-all``;
- VMs: no network device at all (QEMU ``-nodefaults``, none added).

``SandboxSpec.network`` has the single value "none" and is not read yet; egress rules
(a veth plus nftables, from `Egress`) would be decided here.
"""

from dataclasses import dataclass
from typing import Literal

from corral_common.sandboxes import SandboxSpec


@dataclass(frozen=True)
class Egress:
    mode: Literal["none"] = "none"


NO_EGRESS = Egress()


def egress_for(spec: SandboxSpec) -> Egress:
    return NO_EGRESS
