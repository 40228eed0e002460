"""Memory-manager settings: its own fields read ``CORRAL_MEMORY_MANAGER_*`` (see ``corral_common.settings``).

The node id reads ``CORRAL_NODE_ID``, the node-agent's name for it, so one node's env block
configures both. ``proc_root`` / ``sys_root`` point at a fake tree in tests,
or at the host's /proc and /sys bind-mounted somewhere else in a container.
"""

from typing import ClassVar

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from corral_common.settings import CommonSettings, PrefixedServiceSettings


class MemoryManagerSettings(PrefixedServiceSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_MEMORY_MANAGER_", extra="ignore")
    renamed_fields: ClassVar[dict[str, str]] = {
        **CommonSettings.renamed_fields, "memory_manager_host": "host", "memory_manager_port": "port"}

    host: str = "127.0.0.1"
    port: int = 8003
    # The node-agent's name for it: the two services of one node must agree on it.
    node_id: str = Field("node-1", validation_alias="CORRAL_NODE_ID")
    proc_root: str = Field("/proc", validation_alias=AliasChoices(
        "CORRAL_MEMORY_MANAGER_PROC_ROOT", "CORRAL_PROC_ROOT"))
    sys_root: str = Field("/sys", validation_alias=AliasChoices("CORRAL_MEMORY_MANAGER_SYS_ROOT", "CORRAL_SYS_ROOT"))
