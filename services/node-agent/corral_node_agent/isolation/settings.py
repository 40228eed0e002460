"""Who a sandbox runs as on the host, nested in the node's settings as ``isolation``."""

from pydantic import Field, field_validator

from corral_node_agent.section import NodeSection, env_names


class IsolationSettings(NodeSection):
    section = "isolation"

    # The uid[:gid] a container's processes run as inside it (and on the host without a user
    # namespace).
    sandbox_user: str = Field("1000:1000", validation_alias=env_names("isolation", "sandbox_user", flat="sandbox_user"))
    # Containers run in a user namespace of their own: 65,536 host uids/gids per sandbox, from
    # container_uid_base + i * 65536 (0 = ranges in [2^28, 2^31), where this node starts
    # looking derived from its node id). -1: no user namespace (every sandbox is host
    # sandbox_user, root inside is host root).
    container_uid_base: int = Field(0, validation_alias=env_names("isolation", "container_uid_base",
                                                                  flat="container_uid_base"))
    # Each QEMU drops to its own uid/gid, vm_uid_base + a slot number (0 = derive a base from
    # the node id, so two agents on one host do not share uids). -1 keeps QEMU as root.
    vm_uid_base: int = Field(0, validation_alias=env_names("isolation", "vm_uid_base", flat="vm_uid_base"))
    # Host-wide registry of claimed uid ranges (one file per range), so agents sharing a host
    # never hand out the same ids: every agent on the host must see the same directory.
    uid_registry_dir: str = Field("/run/corral/uid-ranges", validation_alias=env_names(
        "isolation", "uid_registry_dir", flat="uid_registry_dir"))

    @field_validator("sandbox_user")
    @classmethod
    def _numeric_user(cls, value: str) -> str:
        uid, _, gid = value.partition(":")
        if not uid.isdigit() or (gid and not gid.isdigit()):
            raise ValueError("sandbox_user must be UID[:GID] (numbers)")
        return value

    @property
    def sandbox_uid(self) -> int:
        return int(self.sandbox_user.partition(":")[0])

    @property
    def sandbox_gid(self) -> int:
        uid, _, gid = self.sandbox_user.partition(":")
        return int(gid or uid)
