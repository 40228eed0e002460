"""Settings shared by every Corral service, and the one naming convention they all follow.

Every setting is an environment variable. A service's own fields read ``<its prefix><FIELD>``
(``CORRAL_API_``, ``CORRAL_SCHEDULER_``, ``CORRAL_IMAGE_``, ``CORRAL_MEMORY_MANAGER_``,
``CORRAL_NODE_``) and carry no prefix in their Python names (``settings.host``, not
``settings.api_host``). The fields shared by every service (this module's ``CommonSettings``)
read ``CORRAL_<FIELD>``, so one deployment-wide block configures them all.

Renames keep the old names working: an old environment variable is a further choice in the
field's ``validation_alias`` (canonical name first, so it wins when both are set), and an old
keyword argument is listed in ``renamed_fields`` (old name -> field). Aliases are never bare
field names: those would also match unprefixed environment variables such as ``API_PORT``,
which Kubernetes sets for a service called ``api``. ``docs/configuration.md`` is generated
from these models (``scripts/generate_settings_doc.py``).
"""

from typing import Any, ClassVar

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict


class CommonSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore", populate_by_name=True)
    # Old keyword names still accepted by the constructor: old name -> field name.
    renamed_fields: ClassVar[dict[str, str]] = {
        "node_heartbeat_timeout_s": "heartbeat_timeout_s",
        "node_heartbeat_interval_s": "heartbeat_interval_s",
    }

    # Sandbox and node state (the source of truth for the control plane).
    redis_url: str = "redis://127.0.0.1:6379/0"
    # The event bus (topic exchange "corral") and the fncall work queues.
    amqp_url: str = "amqp://guest:guest@127.0.0.1:5672/"
    # How long a publish waits for RabbitMQ (a broker restart: the connection comes back on its
    # own) before it gives up: an HTTP request then answers 503 with Retry-After, nothing sent.
    amqp_publish_timeout_s: float = Field(20.0, gt=0)
    image_service_url: str = "http://127.0.0.1:8002"
    # Shared secret every internal call carries (header X-Corral-Internal-Token): the api's to
    # image-service, the scheduler, node-agents and memory-managers, node-agents' to image-service.
    # Every internal service refuses a non-health request without it (401). Empty disables the
    # check: for a single-user development machine only (`make up` and compose always set one).
    internal_token: str = ""
    # Redis connections one process keeps at most; a caller waits up to redis_pool_timeout_s for a
    # free one, then gets 503 with Retry-After (never a 500).
    redis_max_connections: int = Field(100, ge=1)
    redis_pool_timeout_s: float = Field(5.0, gt=0)
    # The SQL pool of the services with a database (api, image-service): connections kept, extra
    # ones allowed under load, and the wait for one before a 503 with Retry-After.
    db_pool_size: int = Field(10, ge=1)
    db_max_overflow: int = Field(20, ge=0)
    db_pool_timeout_s: float = Field(5.0, gt=0)
    # Egress (docs/network.md). The operator's presets a sandbox may name in network.presets:
    # JSON, name -> rules in the allow grammar, e.g. {"pypi": ["pypi.mirror.internal:443"],
    # "llm": ["10.8.0.5:8000"]}. Read by the api (validation) and by every node-agent (which
    # applies them): give both the same value. Corral itself names no public host.
    network_presets: dict[str, list[str]] = Field(default_factory=dict)
    # Let a rule's CIDR span forbidden ranges (e.g. 0.0.0.0/0, "anything public"): the nodes'
    # egress proxies still refuse loopback, link-local, the node, the sandboxes and the platform's
    # services at connect time. False: such a rule is a 422.
    network_allow_any: bool = False
    # Further IPv4 networks no sandbox may reach whatever its rules (the site's management and
    # control-plane networks), beyond the built-in ones (loopback, link-local, multicast...).
    network_deny_cidrs: list[str] = Field(default_factory=list)
    # The subnet node-agents take sandbox addresses from (a /31 per sandbox with an allowlist);
    # never reachable from a sandbox.
    network_sandbox_cidr: str = "100.96.0.0/16"
    log_level: str = "INFO"
    # One JSON object per log line (false: human-readable console lines).
    log_json: bool = True
    # OTLP endpoint for traces; empty means tracing stays in-process (no exporter).
    otel_exporter_otlp_endpoint: str = ""
    # Seconds without a heartbeat after which the scheduler's reaper declares a node lost. A busy
    # agent's liveness pulse stands in for its late full heartbeat for up to 6 of these (then
    # the agent counts as wedged); a full heartbeat older than this takes no new sandbox.
    heartbeat_timeout_s: float = Field(10.0, validation_alias=AliasChoices(
        "CORRAL_HEARTBEAT_TIMEOUT_S", "CORRAL_NODE_HEARTBEAT_TIMEOUT_S"))
    # How often a node-agent heartbeats (well under the timeout).
    heartbeat_interval_s: float = Field(2.0, validation_alias=AliasChoices(
        "CORRAL_HEARTBEAT_INTERVAL_S", "CORRAL_NODE_HEARTBEAT_INTERVAL_S"))

    def __init__(self, **values: Any) -> None:
        for old, new in self.renamed_fields.items():
            if old in values:
                values.setdefault(new, values.pop(old))
        super().__init__(**values)

    def redis_pool(self) -> dict[str, Any]:
        """The bounds of this service's Redis pool, as ``StateStore.from_url`` takes them."""
        return {"max_connections": self.redis_max_connections, "pool_timeout_s": self.redis_pool_timeout_s}

    def sql_pool(self) -> dict[str, Any]:
        """The bounds of this service's SQL pool, as ``create_engine`` takes them."""
        return {"pool_size": self.db_pool_size, "max_overflow": self.db_max_overflow,
                "pool_timeout": self.db_pool_timeout_s}


class _CommonEnvSource(EnvSettingsSource):
    """``CORRAL_*`` env vars, restricted to the fields of CommonSettings (so another service's
    ``CORRAL_PORT`` cannot leak into a service with its own prefix). Fields with aliases need
    no help from here: the service's own source reads aliases without its prefix."""

    def __call__(self) -> dict[str, Any]:
        return {k: v for k, v in super().__call__().items() if k in CommonSettings.model_fields}


class PrefixedServiceSettings(CommonSettings):
    """Base of every service's settings: its own fields use its prefix (``CORRAL_NODE_``, ...),
    its shared fields still read the deployment-wide ``CORRAL_*`` names, and
    ``<PREFIX><FIELD>`` overrides one of those for this service only."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        common = _CommonEnvSource(settings_cls, env_prefix="CORRAL_", case_sensitive=False)
        return init_settings, env_settings, common, dotenv_settings, file_secret_settings

class FncallSettingsBase(BaseSettings):
    """``CORRAL_FNCALL_*``: one env namespace for the fncall settings of the api and of the
    node-agents, so one deployment block configures both sides of fncall. Each service declares
    its own fields on a subclass, nested in its settings as ``fncall``; a name means one thing
    (no field is declared by both, which a unit test checks)."""

    model_config = SettingsConfigDict(env_prefix="CORRAL_FNCALL_", extra="ignore")


# How long our HTTP servers keep an idle connection open. Longer than httpx's 5 s pool expiry,
# so a client never reuses a connection at the moment the server closes it (a ReadError).
HTTP_KEEP_ALIVE_S = 75
