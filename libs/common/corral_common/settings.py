"""Settings shared by every Corral service.

All settings come from environment variables with the ``CORRAL_`` prefix (pydantic-settings),
so one ``.env``-style block configures a whole deployment.
"""

from typing import Any

from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict


class CommonSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore")

    redis_url: str = "redis://127.0.0.1:6379/0"
    amqp_url: str = "amqp://guest:guest@127.0.0.1:5672/"
    image_service_url: str = "http://127.0.0.1:8002"
    # Shared secret the api presents to node-agents (data path). Empty disables the check (dev).
    internal_token: str = ""
    log_level: str = "INFO"
    log_json: bool = True
    # OTLP endpoint for traces; empty means tracing stays in-process (no exporter).
    otel_exporter_otlp_endpoint: str = ""
    # Seconds without a heartbeat after which a node is considered lost.
    node_heartbeat_timeout_s: float = 10.0
    node_heartbeat_interval_s: float = 2.0


class _CommonEnvSource(EnvSettingsSource):
    """``CORRAL_*`` env vars, restricted to the fields of CommonSettings (so another service's
    ``CORRAL_PORT`` cannot leak into a service with its own prefix)."""

    def __call__(self) -> dict[str, Any]:
        return {k: v for k, v in super().__call__().items() if k in CommonSettings.model_fields}


class PrefixedServiceSettings(CommonSettings):
    """Base for a service whose own fields use a longer prefix (``CORRAL_NODE_``, ...): its
    shared fields still read the deployment-wide ``CORRAL_*`` names, and
    ``<PREFIX><FIELD>`` overrides one for this service only."""

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
