"""Settings of the scheduler: its own fields read ``CORRAL_SCHEDULER_*`` (see ``corral_common.settings``)."""

from typing import ClassVar, Literal

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from corral_common.settings import CommonSettings, PrefixedServiceSettings


class SchedulerSettings(PrefixedServiceSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_SCHEDULER_", extra="ignore")
    renamed_fields: ClassVar[dict[str, str]] = {
        **CommonSettings.renamed_fields, "scheduler_host": "host", "scheduler_port": "port"}

    host: str = "127.0.0.1"
    port: int = 8001
    # spread: most free memory first (fewer noisy neighbours); pack: least free first (fewer nodes busy).
    placement_strategy: Literal["spread", "pack"] = Field("spread", validation_alias=AliasChoices(
        "CORRAL_SCHEDULER_PLACEMENT_STRATEGY", "CORRAL_PLACEMENT_STRATEGY"))
    # Image locality: prefer the node holding most of the environment's layer bytes (nodes
    # report them with their heartbeat), then load; environments are asked of image-service
    # (cached briefly). Off: load alone decides.
    placement_locality: bool = True
    # Nodes whose load (0..1, the scarcest resource) is within this of the least loaded one's
    # compete on locality; the rest come after by load (1.0: locality always first).
    placement_locality_slack: float = Field(0.25, ge=0.0, le=1.0)
    # Environments smaller than this are placed by load alone: fetching a few MB costs a cold
    # node milliseconds, while preferring the nodes that hold them keeps every sandbox of a small
    # image on the first node that ran it (the spread strategy would no longer spread).
    placement_locality_min_mb: int = Field(64, ge=0)
    # Admission on measured use (0: off). The node's advertised memory (its claim x
    # CORRAL_NODE_MEMORY_OVERCOMMIT) caps what the sandboxes' memory requests reserve. A node also
    # takes a sandbox only while its measured working set (heartbeat) + the sandbox's request +
    # this safety reserve stay within its physical claim (the node cgroup's limit): requests are
    # what idle sandboxes use, so real use, not the sum of requests, is what must not come near
    # the claim (docs/architecture.md, "Capacity").
    placement_measured_memory_reserve_mb: int = Field(512, ge=0)
    # How often a request that found no room looks again, and how many wait at once.
    placement_retry_s: float = Field(0.2, validation_alias=AliasChoices(
        "CORRAL_SCHEDULER_PLACEMENT_RETRY_S", "CORRAL_PLACEMENT_RETRY_S"))
    placement_prefetch: int = Field(256, validation_alias=AliasChoices(
        "CORRAL_SCHEDULER_PLACEMENT_PREFETCH", "CORRAL_PLACEMENT_PREFETCH"))
    reaper_interval_s: float = Field(1.0, validation_alias=AliasChoices(
        "CORRAL_SCHEDULER_REAPER_INTERVAL_S", "CORRAL_REAPER_INTERVAL_S"))
