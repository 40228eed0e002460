"""Which Corral environment (and isolation) an E2B create asks for.

Three sources, first match wins: the metadata key the operator configured (clients such as
slime pick the image by metadata), the operator's templateID mapping, the templateID taken
as an environment name. Isolation comes from the isolation metadata key or the mapping's
``/vm`` suffix.
"""

from dataclasses import dataclass
from typing import Literal

Isolation = Literal["container", "vm"]


@dataclass(frozen=True)
class Choice:
    environment: str
    isolation: Isolation = "container"


def parse_mapping(spec: str) -> dict[str, Choice]:
    """``"base=busybox,secure=busybox/vm"`` → {"base": Choice("busybox"), "secure": Choice("busybox", "vm")}."""
    mapping = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        template, sep, target = item.partition("=")
        environment, _, isolation = target.partition("/")
        if not sep or not template.strip() or not environment.strip() or isolation not in ("", "container", "vm"):
            raise ValueError(f"e2b_templates entry {item!r} must be template=environment[/container|/vm]")
        mapping[template.strip()] = Choice(environment.strip(), isolation or "container")  # type: ignore[arg-type]
    return mapping


class TemplateResolver:
    def __init__(self, mapping: str, environment_key: str, isolation_key: str):
        self.mapping = parse_mapping(mapping)
        self.environment_key = environment_key
        self.isolation_key = isolation_key

    def resolve(self, template_id: str, metadata: dict[str, str]) -> Choice:
        """The environment and isolation (ValueError for an isolation value that is neither)."""
        choice = self.mapping.get(template_id, Choice(template_id))
        if self.environment_key and metadata.get(self.environment_key):
            choice = Choice(metadata[self.environment_key], choice.isolation)
        isolation = metadata.get(self.isolation_key) if self.isolation_key else None
        if isolation:
            if isolation not in ("container", "vm"):
                raise ValueError(f"metadata {self.isolation_key!r} must be 'container' or 'vm', not {isolation!r}")
            choice = Choice(choice.environment, isolation)  # type: ignore[arg-type]
        return choice


# Metadata keys an E2B client sets to give its sandbox's requests (what placement counts; the
# SDK's cpuCount/memoryMB are its limits): corral.requests.cpu, .memory_mb, .disk_mb, .pids.
REQUESTS_METADATA_PREFIX = "corral.requests."


def requests_from_metadata(metadata: dict[str, str]) -> dict[str, str]:
    """The ``requests`` of the spec, as the metadata gives them (validated with the spec: a bad
    value or an unknown name is refused there, naming it)."""
    return {key.removeprefix(REQUESTS_METADATA_PREFIX): value for key, value in metadata.items()
            if key.startswith(REQUESTS_METADATA_PREFIX)}
