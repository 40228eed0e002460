"""Memory-manager settings.

Everything reads ``CORRAL_*``: the shared fields (``CORRAL_REDIS_URL``...), this service's own
``CORRAL_MEMORY_MANAGER_HOST`` / ``CORRAL_MEMORY_MANAGER_PORT``, and the node id under the same
name the node-agent uses (``CORRAL_NODE_ID``) so one node's env block configures both.
``proc_root`` / ``sys_root`` (``CORRAL_PROC_ROOT`` / ``CORRAL_SYS_ROOT``) point at a fake tree in
tests, or at the host's /proc and /sys bind-mounted somewhere else in a container.
"""

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from corral_common.settings import CommonSettings


class MemoryManagerSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore")

    memory_manager_host: str = "127.0.0.1"
    memory_manager_port: int = 8003
    node_id: str = Field("node-1", validation_alias=AliasChoices("CORRAL_NODE_ID", "node_id"))
    proc_root: str = "/proc"
    sys_root: str = "/sys"
