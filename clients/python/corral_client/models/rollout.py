from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.rollout_status import RolloutStatus
from ..models.sandbox_state import SandboxState
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.rollout_info_type_0 import RolloutInfoType0
    from ..models.rollout_metadata import RolloutMetadata
    from ..models.step import Step


T = TypeVar("T", bound="Rollout")


@_attrs_define
class Rollout:
    """
    Attributes:
        created_at (datetime.datetime):
        id (str):
        idle_pause_s (float):
        job_id (str):
        metadata (RolloutMetadata):
        owns_sandbox (bool):
        sandbox_id (str):
        status (RolloutStatus):
        step_count (int): Steps committed or executing (the next index)
        ttl_s (float):
        updated_at (datetime.datetime):
        finished_at (datetime.datetime | None | Unset):
        info (None | RolloutInfoType0 | Unset):
        reward (float | None | Unset):
        sandbox_state (None | SandboxState | Unset):
        steps (list[Step] | None | Unset): The trajectory (GET /v1/rollouts/{id} only)
    """

    created_at: datetime.datetime
    id: str
    idle_pause_s: float
    job_id: str
    metadata: RolloutMetadata
    owns_sandbox: bool
    sandbox_id: str
    status: RolloutStatus
    step_count: int
    ttl_s: float
    updated_at: datetime.datetime
    finished_at: datetime.datetime | None | Unset = UNSET
    info: None | RolloutInfoType0 | Unset = UNSET
    reward: float | None | Unset = UNSET
    sandbox_state: None | SandboxState | Unset = UNSET
    steps: list[Step] | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.rollout_info_type_0 import RolloutInfoType0

        created_at = self.created_at.isoformat()

        id = self.id

        idle_pause_s = self.idle_pause_s

        job_id = self.job_id

        metadata = self.metadata.to_dict()

        owns_sandbox = self.owns_sandbox

        sandbox_id = self.sandbox_id

        status = self.status.value

        step_count = self.step_count

        ttl_s = self.ttl_s

        updated_at = self.updated_at.isoformat()

        finished_at: None | str | Unset
        if isinstance(self.finished_at, Unset):
            finished_at = UNSET
        elif isinstance(self.finished_at, datetime.datetime):
            finished_at = self.finished_at.isoformat()
        else:
            finished_at = self.finished_at

        info: dict[str, Any] | None | Unset
        if isinstance(self.info, Unset):
            info = UNSET
        elif isinstance(self.info, RolloutInfoType0):
            info = self.info.to_dict()
        else:
            info = self.info

        reward: float | None | Unset
        if isinstance(self.reward, Unset):
            reward = UNSET
        else:
            reward = self.reward

        sandbox_state: None | str | Unset
        if isinstance(self.sandbox_state, Unset):
            sandbox_state = UNSET
        elif isinstance(self.sandbox_state, SandboxState):
            sandbox_state = self.sandbox_state.value
        else:
            sandbox_state = self.sandbox_state

        steps: list[dict[str, Any]] | None | Unset
        if isinstance(self.steps, Unset):
            steps = UNSET
        elif isinstance(self.steps, list):
            steps = []
            for steps_type_0_item_data in self.steps:
                steps_type_0_item = steps_type_0_item_data.to_dict()
                steps.append(steps_type_0_item)

        else:
            steps = self.steps

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "created_at": created_at,
                "id": id,
                "idle_pause_s": idle_pause_s,
                "job_id": job_id,
                "metadata": metadata,
                "owns_sandbox": owns_sandbox,
                "sandbox_id": sandbox_id,
                "status": status,
                "step_count": step_count,
                "ttl_s": ttl_s,
                "updated_at": updated_at,
            }
        )
        if finished_at is not UNSET:
            field_dict["finished_at"] = finished_at
        if info is not UNSET:
            field_dict["info"] = info
        if reward is not UNSET:
            field_dict["reward"] = reward
        if sandbox_state is not UNSET:
            field_dict["sandbox_state"] = sandbox_state
        if steps is not UNSET:
            field_dict["steps"] = steps

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.rollout_info_type_0 import RolloutInfoType0
        from ..models.rollout_metadata import RolloutMetadata
        from ..models.step import Step

        d = dict(src_dict)
        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        id = d.pop("id")

        idle_pause_s = d.pop("idle_pause_s")

        job_id = d.pop("job_id")

        metadata = RolloutMetadata.from_dict(d.pop("metadata"))

        owns_sandbox = d.pop("owns_sandbox")

        sandbox_id = d.pop("sandbox_id")

        status = RolloutStatus(d.pop("status"))

        step_count = d.pop("step_count")

        ttl_s = d.pop("ttl_s")

        updated_at = datetime.datetime.fromisoformat(d.pop("updated_at"))

        def _parse_finished_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                finished_at_type_0 = datetime.datetime.fromisoformat(data)

                return finished_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        finished_at = _parse_finished_at(d.pop("finished_at", UNSET))

        def _parse_info(data: object) -> None | RolloutInfoType0 | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                info_type_0 = RolloutInfoType0.from_dict(data)

                return info_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | RolloutInfoType0 | Unset, data)

        info = _parse_info(d.pop("info", UNSET))

        def _parse_reward(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        reward = _parse_reward(d.pop("reward", UNSET))

        def _parse_sandbox_state(data: object) -> None | SandboxState | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                sandbox_state_type_0 = SandboxState(data)

                return sandbox_state_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | SandboxState | Unset, data)

        sandbox_state = _parse_sandbox_state(d.pop("sandbox_state", UNSET))

        def _parse_steps(data: object) -> list[Step] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                steps_type_0 = []
                _steps_type_0 = data
                for steps_type_0_item_data in _steps_type_0:
                    steps_type_0_item = Step.from_dict(steps_type_0_item_data)

                    steps_type_0.append(steps_type_0_item)

                return steps_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[Step] | None | Unset, data)

        steps = _parse_steps(d.pop("steps", UNSET))

        rollout = cls(
            created_at=created_at,
            id=id,
            idle_pause_s=idle_pause_s,
            job_id=job_id,
            metadata=metadata,
            owns_sandbox=owns_sandbox,
            sandbox_id=sandbox_id,
            status=status,
            step_count=step_count,
            ttl_s=ttl_s,
            updated_at=updated_at,
            finished_at=finished_at,
            info=info,
            reward=reward,
            sandbox_state=sandbox_state,
            steps=steps,
        )

        rollout.additional_properties = d
        return rollout

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
