"""Settings of the api: its own fields read ``CORRAL_API_*`` (see ``corral_common.settings``)."""

from typing import ClassVar

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from corral_api.fncall.settings import FncallApiSettings
from corral_common.settings import CommonSettings, PrefixedServiceSettings


class ApiSettings(PrefixedServiceSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_API_", extra="ignore")
    renamed_fields: ClassVar[dict[str, str]] = {
        **CommonSettings.renamed_fields, "api_host": "host", "api_port": "port", "api_data_dir": "data_dir",
        "api_database_url": "database_url", "api_keys": "keys", "api_max_upload_mb": "max_upload_mb",
        "api_max_wait_s": "max_wait_s"}

    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: str = "/var/lib/corral/api"
    # Empty: sqlite:///{data_dir}/api.db. PostgreSQL: postgresql+psycopg://user:pw@host/db
    database_url: str = ""
    # Bootstrap keys, "tenant:key,tenant2:key2". Stored hashed in SQL at start.
    keys: str = ""
    max_upload_mb: int = 100
    # The largest disk_mb a sandbox may ask for (0: as large as the largest live node holds).
    max_disk_mb: int = 0
    # Longest a client may block on ?wait_for=.
    max_wait_s: float = 300.0
    # Overload (docs/security.md). Requests one tenant may have in flight on this replica
    # (streams and ?wait_for= count while they last); beyond it 429 with Retry-After, so one
    # tenant cannot take every connection and slot from the others. Per replica: with R api
    # replicas a tenant gets at most R x this.
    tenant_max_inflight: int = Field(256, ge=1)
    # Connections to node-agents (the data path) and to image-service; a request waits up to
    # http_pool_timeout_s for a free one, then 503 with Retry-After.
    node_max_connections: int = Field(1000, ge=1)
    image_service_max_connections: int = Field(100, ge=1)
    http_pool_timeout_s: float = Field(5.0, gt=0)
    # Rollouts: pause a rollout's sandbox after this idle time (0: never), release it after
    # this idle time, how often the sweeper looks, and the lease a running step holds.
    rollout_idle_pause_s: float = Field(300.0, validation_alias=AliasChoices(
        "CORRAL_API_ROLLOUT_IDLE_PAUSE_S", "CORRAL_ROLLOUT_IDLE_PAUSE_S"))
    rollout_ttl_s: float = Field(86400.0, validation_alias=AliasChoices(
        "CORRAL_API_ROLLOUT_TTL_S", "CORRAL_ROLLOUT_TTL_S"))
    rollout_sweep_interval_s: float = Field(1.0, validation_alias=AliasChoices(
        "CORRAL_API_ROLLOUT_SWEEP_INTERVAL_S", "CORRAL_ROLLOUT_SWEEP_INTERVAL_S"))
    rollout_step_lease_s: float = Field(10.0, validation_alias=AliasChoices(
        "CORRAL_API_ROLLOUT_STEP_LEASE_S", "CORRAL_ROLLOUT_STEP_LEASE_S"))
    # SandboxFusion on a dedicated port (0: off): POST /run_code and GET /v1/ping at its root,
    # without credentials (SkyRL hard-codes http://{host}:8080/run_code), every call counted as
    # sandboxfusion_tenant's (required with a port). It listens on sandboxfusion_host: loopback
    # unless the operator names an address on a trusted network.
    sandboxfusion_port: int = Field(0, ge=0, le=65535)
    sandboxfusion_host: str = "127.0.0.1"
    sandboxfusion_tenant: str = ""
    # fncall calls and batches: CORRAL_FNCALL_* (FncallApiSettings reads its own env names).
    fncall: FncallApiSettings = Field(default_factory=FncallApiSettings)

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir}/api.db"
