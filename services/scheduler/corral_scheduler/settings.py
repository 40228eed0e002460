from typing import Literal

from pydantic_settings import SettingsConfigDict

from corral_common.settings import CommonSettings


class SchedulerSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore")

    scheduler_host: str = "127.0.0.1"
    scheduler_port: int = 8001
    # spread: most free memory first (fewer noisy neighbours); pack: least free first (fewer nodes busy).
    placement_strategy: Literal["spread", "pack"] = "spread"
    # How often a request that found no room looks again, and how many wait at once.
    placement_retry_s: float = 0.2
    placement_prefetch: int = 256
    reaper_interval_s: float = 1.0
