from pydantic import BaseModel, Field


class ReclaimEntry(BaseModel):
    sandbox_id: str
    reason: str = Field(description="paused, idle, or pressure (idle for less than idle_after_s, taken because "
                                    "the host ran short)")
    before_bytes: int = Field(description="Working set before the pageout")
    after_bytes: int
    reclaimed_bytes: int
    seconds: float
    at: float = Field(description="Unix time")


class ReclaimStatus(BaseModel):
    enabled: bool
    available: bool = Field(description="Whether this host gives the manager the node's cgroups")
    swap_device: str | None = Field(None, description="The zram swap set up or found at start")
    seen: int = Field(0, description="Sandboxes seen at the last pass")
    candidates: int = Field(0, description="Of them, idle or paused and due at the last pass")
    last_pass_seconds: float = 0.0
    pressure: bool = Field(False, description="Whether the last pass found the host short of memory")
    recent: list[ReclaimEntry] = Field(default_factory=list, description="The last reclaims, newest last")
