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
    # Bootstrap operator keys (the admin routes /v1/admin/*), "name:key,name2:key2", stored
    # hashed in SQL at start as keys of role operator of the tenant operator_tenant.
    operator_keys: str = Field("", description=(
        "Operator keys for /v1/admin/*, 'name:key' comma-separated; stored hashed in SQL at start"))
    operator_tenant: str = Field("operator", description="Tenant the bootstrap operator keys belong to")
    # Request bodies (corral_api/body_limits.py): every route's at most max_body_kb, counted as it
    # arrives whatever its framing; uploads (files, E2B /files, SWE-ReX, port ingress, rollout
    # steps) max_upload_mb, image uploads image_max_upload_mb, fncall its own (fncall.max_body_mb).
    max_body_kb: int = Field(1024, ge=1)
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
    # Images (corral_api/images): bytes of layer images each tenant may hold (0: no quota;
    # identical content is stored once but charged to each tenant that registered it), and the
    # largest layer tar or image archive one upload may be.
    image_quota_mb: int = Field(10240, ge=0)
    image_max_upload_mb: int = Field(4096, ge=1)
    # E2B-compatible surface (corral_api/compat/e2b). Operator mapping of E2B templateIDs to
    # Corral environments, "template=environment[/isolation]" comma-separated (isolation:
    # container|vm); a templateID not listed is taken as an environment name itself.
    e2b_templates: str = Field("base=busybox,code-interpreter-v1=judge", description=(
        "E2B templateID -> Corral environment, 'template=environment[/vm]' comma-separated; "
        "unlisted templateIDs are used as environment names"))
    # Clients that choose the image by metadata (slime): this metadata key, when present,
    # names the environment and wins over templateID. Empty: off.
    e2b_template_metadata_key: str = Field("corral.environment", description=(
        "E2B metadata key whose value names the Corral environment (wins over templateID); empty: off"))
    # Metadata key that asks for a hardware boundary ("vm") or a container ("container").
    e2b_isolation_metadata_key: str = Field("corral.isolation", description=(
        "E2B metadata key whose value (container|vm) sets the sandbox's isolation"))
    # E2B's default sandbox lifetime when create sends no timeout, and the longest one a
    # create, connect or set_timeout may ask for (seconds).
    e2b_default_timeout_s: int = Field(300, ge=1, description="E2B sandbox lifetime when create sends no timeout")
    e2b_max_timeout_s: int = Field(86400, ge=1, le=7 * 24 * 3600,
                                   description="Longest E2B sandbox lifetime a create/connect/set_timeout may ask for")
    # How often the reaper ends E2B sandboxes whose deadline passed.
    e2b_reaper_interval_s: float = Field(1.0, gt=0, description="How often E2B sandboxes past their deadline are killed")
    # The envd version reported to the SDK: it gates client features (>= 0.5.7: octet-stream
    # and gzip uploads; < 0.6.2: no file metadata, which this surface does not keep).
    e2b_envd_version: str = Field("0.5.8", description="envdVersion reported to the E2B SDK (gates its features)")
    # How long create waits for the sandbox to run before answering (E2B's create is synchronous).
    # Below the E2B SDK's own request timeout (60 s), so that a create no node has room for is
    # answered (503, with the reason it waited) before the client gives up on it.
    e2b_create_wait_s: float = Field(45.0, gt=0, description="Longest an E2B create waits for the sandbox to run")
    # SandboxFusion on a dedicated port (0: off): POST /run_code and GET /v1/ping at its root,
    # without credentials (SkyRL hard-codes http://{host}:8080/run_code), every call counted as
    # sandboxfusion_tenant's (required with a port). It listens on sandboxfusion_host: loopback
    # unless the operator names an address on a trusted network.
    sandboxfusion_port: int = Field(0, ge=0, le=65535)
    sandboxfusion_host: str = "127.0.0.1"
    sandboxfusion_tenant: str = ""
    ui_session_ttl_s: int = Field(8 * 3600, ge=60, le=30 * 86400,
                                  description="How long a dashboard (/ui) session lasts without a request "
                                              "(sliding; kept in Redis)")
    # fncall calls and batches: CORRAL_FNCALL_* (FncallApiSettings reads its own env names).
    fncall: FncallApiSettings = Field(default_factory=FncallApiSettings)

    @property
    def image_quota_bytes(self) -> int | None:
        return self.image_quota_mb * 1024 * 1024 if self.image_quota_mb else None

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir}/api.db"
