from pydantic import Field
from pydantic_settings import SettingsConfigDict

from corral_api.fncall.settings import FncallApiSettings
from corral_common.settings import CommonSettings


class ApiSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore")

    api_host: str = "127.0.0.1"
    api_port: int = 8000
    api_data_dir: str = "/var/lib/corral/api"
    # Empty: sqlite:///{api_data_dir}/api.db. PostgreSQL: postgresql+psycopg://user:pw@host/db
    api_database_url: str = ""
    # Bootstrap keys, "tenant:key,tenant2:key2". Stored hashed in SQL at start.
    api_keys: str = ""
    api_max_upload_mb: int = 100
    # Longest a client may block on ?wait_for=.
    api_max_wait_s: float = 300.0
    # Rollouts: pause a rollout's sandbox after this idle time (0: never), release it after
    # this idle time, how often the sweeper looks, and the lease a running step holds.
    rollout_idle_pause_s: float = 300.0
    rollout_ttl_s: float = 86400.0
    rollout_sweep_interval_s: float = 1.0
    rollout_step_lease_s: float = 10.0
    # fncall calls and batches: CORRAL_FNCALL_* (FncallApiSettings reads its own env names).
    fncall: FncallApiSettings = Field(default_factory=FncallApiSettings)

    @property
    def database_url(self) -> str:
        return self.api_database_url or f"sqlite:///{self.api_data_dir}/api.db"
