"""A VM the backend runs: its QEMU, its guest agent and what it holds on the host."""

import asyncio
import time
from dataclasses import dataclass, field

from corral_common.contracts.sandboxes import SandboxSpec, Usage
from corral_host.cgroups.base import Cgroup
from corral_node_agent.backends.types import ImageTransport
from corral_node_agent.backends.vm.agent_client import GuestAgentClient
from corral_node_agent.backends.vm.machine import QemuMachine
from corral_node_agent.backends.vm.qemu import MachineConfig
from corral_node_agent.network.egress import Slot


@dataclass
class RunningVm:
    sandbox_id: str
    spec: SandboxSpec
    directory: str
    machine: QemuMachine
    config: MachineConfig
    transport: ImageTransport
    # None until the guest's agent answers, and for user disk images (no Corral agent inside).
    agent: GuestAgentClient | None = None
    cgroup: Cgroup | None = None
    started: float = field(default_factory=time.monotonic)
    paused: bool = False
    stopping: bool = False
    usage: Usage | None = None
    screen: tuple[int, int] = (0, 0)
    tasks: list[asyncio.Task] = field(default_factory=list)
    uid_slot: int | None = None
    net: Slot | None = None  # an egress allowlist's namespace (network/egress.py); None: no NIC
