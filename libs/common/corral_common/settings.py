"""Settings shared by every Corral service.

All settings come from environment variables with the ``CORRAL_`` prefix (pydantic-settings),
so one ``.env``-style block configures a whole deployment.
"""

from pydantic_settings import BaseSettings, SettingsConfigDict


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
