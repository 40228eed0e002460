"""NodeSection: the base of one package's slice of the node-agent's settings (``vm``,
``egress``, ``warm_pool``, ``isolation``), nested in ``NodeAgentSettings``.

A nested field is read from ``CORRAL_NODE_<SECTION>__<FIELD>`` and, for a release, from the
flat name it had before the settings were nested (``CORRAL_NODE_VM_BOOT_TIMEOUT_S``): both are
the choices of its ``validation_alias`` (``env_names``), the nested one first, which wins when
both are set. ``NodeAgentSettings`` also still takes the flat keyword (``vm_boot_timeout_s=``)
and answers the flat attribute (``settings.vm_boot_timeout_s``): see ``flat_names``. The flat
names can go once deployments set the nested ones.
"""

from typing import ClassVar

from pydantic import AliasChoices, BaseModel, ConfigDict

NODE_PREFIX = "CORRAL_NODE_"
NESTED_DELIMITER = "__"


def env_names(section: str, field: str, flat: str | None = None) -> AliasChoices:
    """A nested field's environment variables: CORRAL_NODE_<SECTION>__<FIELD>, then its flat
    name of before (CORRAL_NODE_<FLAT>; by default <SECTION>_<FIELD>)."""
    flat = flat or f"{section}_{field}"
    return AliasChoices(f"{NODE_PREFIX}{section}{NESTED_DELIMITER}{field}".upper(), f"{NODE_PREFIX}{flat}".upper())


class NodeSection(BaseModel):
    # The section's name in environment variables (CORRAL_NODE_<section>__<FIELD>).
    section: ClassVar[str]
    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=True)


def flat_names(sections: dict[str, type[NodeSection]]) -> dict[str, tuple[str, str]]:
    """Flat keyword of before (``vm_boot_timeout_s``) -> (section field, its field)."""
    out = {}
    for attr, model in sections.items():
        for name, field in model.model_fields.items():
            choices = field.validation_alias.choices if isinstance(field.validation_alias, AliasChoices) else []
            for choice in choices[1:]:
                if isinstance(choice, str):
                    out[choice.removeprefix(NODE_PREFIX).lower()] = (attr, name)
    return out
