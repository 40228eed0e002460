from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt


class MemInfo(BaseModel):
    """From /proc/meminfo, in bytes."""

    total_bytes: int
    available_bytes: int
    free_bytes: int
    cached_bytes: int = Field(description="Page cache (Cached), without Buffers or SwapCached")
    buffers_bytes: int
    swap_total_bytes: int
    swap_free_bytes: int
    swap_used_bytes: int


class KsmState(BaseModel):
    """From /sys/kernel/mm/ksm. ``present`` is false on a kernel built without KSM."""

    present: bool
    run: int | None = Field(None, description="0 stopped, 1 running, 2 stopped and unmerged")
    pages_to_scan: int | None = None
    sleep_millisecs: int | None = None
    pages_shared: int | None = None
    pages_sharing: int | None = None
    pages_unshared: int | None = None
    full_scans: int | None = None
    saved_bytes: int = Field(0, description="pages_sharing × page size: memory KSM currently saves")


class Kdamond(BaseModel):
    index: int
    state: str | None = Field(None, description='"on", "off", or null if unreadable')
    pid: int | None = None


class DamonState(BaseModel):
    """Whether DAMON's sysfs admin interface could be used by us. Found by reading only."""

    status: Literal["available", "busy", "absent"] = Field(
        description="available: interface present and idle; busy: a kdamond (or a DAMON module such as "
                    "damon_reclaim) already runs, so starting ours would fail with EBUSY; absent: no "
                    "interface, or it cannot be read")
    reason: str = ""
    kdamonds: list[Kdamond] = []
    modules_enabled: list[str] = Field([], description="DAMON kernel modules reporting enabled=Y")


class SwapDevice(BaseModel):
    """One line of /proc/swaps."""

    filename: str
    type: str
    size_bytes: int
    used_bytes: int
    priority: int
    zram: bool


class ZramDevice(BaseModel):
    """A /sys/block/zram* device; ``swap`` says whether it is in /proc/swaps."""

    name: str
    disksize_bytes: int | None = None
    comp_algorithm: str | None = None
    swap: bool = False


class HostMemory(BaseModel):
    node_id: str
    page_size: int
    meminfo: MemInfo
    ksm: KsmState
    damon: DamonState
    swaps: list[SwapDevice]
    zram: list[ZramDevice]


class KsmUpdate(BaseModel):
    """KSM knobs to set. Unknown fields are refused, as are strings and booleans."""

    model_config = ConfigDict(extra="forbid")

    run: StrictInt = Field(ge=0, le=1, description="1 starts the KSM scanner, 0 stops it (merged pages stay merged)")
    pages_to_scan: StrictInt | None = Field(None, ge=1, le=10_000_000, description="Pages scanned per wake-up")
    sleep_millisecs: StrictInt | None = Field(None, ge=1, le=3_600_000, description="Sleep between scans")
