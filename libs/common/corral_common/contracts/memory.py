"""Node-agent ↔ memory-manager: a VM's balloon and its guest's memory as the balloon reports it.

The node-agent is the one QMP client of each VM (one owner per monitor connection); the
memory-manager reads and sets balloons through these internal calls, never a monitor of its own.
"""

from pydantic import BaseModel, Field

# Sent by the memory-manager on its own execs in a sandbox (the in-guest cache drop): the
# node-agent does not count them as use of the sandbox.
HOUSEKEEPING_HEADER = "X-Corral-Housekeeping"


class GuestMemoryStats(BaseModel):
    """virtio-balloon guest stats (QEMU ``guest-stats``), in MiB; None where the guest sent none."""

    total_mb: float | None = None
    free_mb: float | None = None
    available_mb: float | None = None
    disk_caches_mb: float | None = Field(None, description="Page cache the guest can drop")
    swap_in: int | None = None
    swap_out: int | None = None
    major_faults: int | None = None
    last_update: int = Field(0, description="Unix time of the guest's last report (0: none yet)")


class BalloonState(BaseModel):
    sandbox_id: str
    environment: str = Field("", description="The VM's environment: VMs of one image are what KSM merges")
    memory_mb: int = Field(description="The VM's RAM as configured (the balloon fully deflated)")
    actual_mb: float = Field(description="RAM the guest has now (memory_mb less the inflated balloon)")
    guest: GuestMemoryStats


class BalloonTarget(BaseModel):
    target_mb: int = Field(ge=16, description="RAM to leave the guest; above memory_mb means fully deflated")


class SandboxActivity(BaseModel):
    """What the node-agent knows of a sandbox's use (node-agent ``GET /v1/activity``): the
    memory-manager's idle rule needs it for VMs, whose QEMU burns cpu even when nothing runs."""

    sandbox_id: str
    kind: str = Field(description="Its backend: container, microvm, vm")
    calls_in_flight: int = Field(0, description="Execs, file and port calls running now")
    idle_s: float = Field(description="Seconds since the last data-path call ended (or since it started)")
    cgroup: str | None = Field(None, description="Its cgroup's name under the node's, when not its id "
                               "(a sandbox started ahead for the warm pool keeps the name it started with)")
