from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.rollout_create_metadata import RolloutCreateMetadata
    from ..models.sandbox_create import SandboxCreate


T = TypeVar("T", bound="RolloutCreate")


@_attrs_define
class RolloutCreate:
    """Body of ``POST /v1/rollouts``: a new sandbox (``sandbox``) or an existing one (``sandbox_id``).

    Attributes:
        job_id (str): The training job this rollout belongs to
        idle_pause_s (float | None | Unset): Pause the sandbox after this idle time (0: never); default
            CORRAL_ROLLOUT_IDLE_PAUSE_S
        metadata (RolloutCreateMetadata | Unset):
        sandbox (None | SandboxCreate | Unset): Spec of a new sandbox, as in POST /v1/sandboxes
        sandbox_id (None | str | Unset): Bind an existing sandbox
        ttl_s (float | None | Unset): Release the sandbox after this idle time; default CORRAL_ROLLOUT_TTL_S
    """

    job_id: str
    idle_pause_s: float | None | Unset = UNSET
    metadata: RolloutCreateMetadata | Unset = UNSET
    sandbox: None | SandboxCreate | Unset = UNSET
    sandbox_id: None | str | Unset = UNSET
    ttl_s: float | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.sandbox_create import SandboxCreate

        job_id = self.job_id

        idle_pause_s: float | None | Unset
        if isinstance(self.idle_pause_s, Unset):
            idle_pause_s = UNSET
        else:
            idle_pause_s = self.idle_pause_s

        metadata: dict[str, Any] | Unset = UNSET
        if not isinstance(self.metadata, Unset):
            metadata = self.metadata.to_dict()

        sandbox: dict[str, Any] | None | Unset
        if isinstance(self.sandbox, Unset):
            sandbox = UNSET
        elif isinstance(self.sandbox, SandboxCreate):
            sandbox = self.sandbox.to_dict()
        else:
            sandbox = self.sandbox

        sandbox_id: None | str | Unset
        if isinstance(self.sandbox_id, Unset):
            sandbox_id = UNSET
        else:
            sandbox_id = self.sandbox_id

        ttl_s: float | None | Unset
        if isinstance(self.ttl_s, Unset):
            ttl_s = UNSET
        else:
            ttl_s = self.ttl_s

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "job_id": job_id,
            }
        )
        if idle_pause_s is not UNSET:
            field_dict["idle_pause_s"] = idle_pause_s
        if metadata is not UNSET:
            field_dict["metadata"] = metadata
        if sandbox is not UNSET:
            field_dict["sandbox"] = sandbox
        if sandbox_id is not UNSET:
            field_dict["sandbox_id"] = sandbox_id
        if ttl_s is not UNSET:
            field_dict["ttl_s"] = ttl_s

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.rollout_create_metadata import RolloutCreateMetadata
        from ..models.sandbox_create import SandboxCreate

        d = dict(src_dict)
        job_id = d.pop("job_id")

        def _parse_idle_pause_s(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        idle_pause_s = _parse_idle_pause_s(d.pop("idle_pause_s", UNSET))

        _metadata = d.pop("metadata", UNSET)
        metadata: RolloutCreateMetadata | Unset
        if isinstance(_metadata, Unset):
            metadata = UNSET
        else:
            metadata = RolloutCreateMetadata.from_dict(_metadata)

        def _parse_sandbox(data: object) -> None | SandboxCreate | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                sandbox_type_0 = SandboxCreate.from_dict(data)

                return sandbox_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | SandboxCreate | Unset, data)

        sandbox = _parse_sandbox(d.pop("sandbox", UNSET))

        def _parse_sandbox_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        sandbox_id = _parse_sandbox_id(d.pop("sandbox_id", UNSET))

        def _parse_ttl_s(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        ttl_s = _parse_ttl_s(d.pop("ttl_s", UNSET))

        rollout_create = cls(
            job_id=job_id,
            idle_pause_s=idle_pause_s,
            metadata=metadata,
            sandbox=sandbox,
            sandbox_id=sandbox_id,
            ttl_s=ttl_s,
        )

        return rollout_create
