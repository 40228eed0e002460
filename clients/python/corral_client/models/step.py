from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.step_status import StepStatus
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.step_args import StepArgs
    from ..models.step_error import StepError
    from ..models.step_observation_type_0 import StepObservationType0


T = TypeVar("T", bound="Step")


@_attrs_define
class Step:
    """
    Attributes:
        action (str): One of StepRequest's actions, or an adapter's (swerex.*) for steps it logged
        args (StepArgs):
        index (int):
        request_hash (str):
        started_at (datetime.datetime):
        status (StepStatus):
        duration_ms (float | None | Unset):
        error (None | StepError | Unset):
        finished_at (datetime.datetime | None | Unset):
        observation (None | StepObservationType0 | Unset):
        replayed (bool | Unset): Answered from the log, not executed by this request Default: False.
        replays (int | Unset): Times this step was answered from the log (re-sent requests) Default: 0.
    """

    action: str
    args: StepArgs
    index: int
    request_hash: str
    started_at: datetime.datetime
    status: StepStatus
    duration_ms: float | None | Unset = UNSET
    error: None | StepError | Unset = UNSET
    finished_at: datetime.datetime | None | Unset = UNSET
    observation: None | StepObservationType0 | Unset = UNSET
    replayed: bool | Unset = False
    replays: int | Unset = 0
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.step_error import StepError
        from ..models.step_observation_type_0 import StepObservationType0

        action = self.action

        args = self.args.to_dict()

        index = self.index

        request_hash = self.request_hash

        started_at = self.started_at.isoformat()

        status = self.status.value

        duration_ms: float | None | Unset
        if isinstance(self.duration_ms, Unset):
            duration_ms = UNSET
        else:
            duration_ms = self.duration_ms

        error: dict[str, Any] | None | Unset
        if isinstance(self.error, Unset):
            error = UNSET
        elif isinstance(self.error, StepError):
            error = self.error.to_dict()
        else:
            error = self.error

        finished_at: None | str | Unset
        if isinstance(self.finished_at, Unset):
            finished_at = UNSET
        elif isinstance(self.finished_at, datetime.datetime):
            finished_at = self.finished_at.isoformat()
        else:
            finished_at = self.finished_at

        observation: dict[str, Any] | None | Unset
        if isinstance(self.observation, Unset):
            observation = UNSET
        elif isinstance(self.observation, StepObservationType0):
            observation = self.observation.to_dict()
        else:
            observation = self.observation

        replayed = self.replayed

        replays = self.replays

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "action": action,
                "args": args,
                "index": index,
                "request_hash": request_hash,
                "started_at": started_at,
                "status": status,
            }
        )
        if duration_ms is not UNSET:
            field_dict["duration_ms"] = duration_ms
        if error is not UNSET:
            field_dict["error"] = error
        if finished_at is not UNSET:
            field_dict["finished_at"] = finished_at
        if observation is not UNSET:
            field_dict["observation"] = observation
        if replayed is not UNSET:
            field_dict["replayed"] = replayed
        if replays is not UNSET:
            field_dict["replays"] = replays

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.step_args import StepArgs
        from ..models.step_error import StepError
        from ..models.step_observation_type_0 import StepObservationType0

        d = dict(src_dict)
        action = d.pop("action")

        args = StepArgs.from_dict(d.pop("args"))

        index = d.pop("index")

        request_hash = d.pop("request_hash")

        started_at = datetime.datetime.fromisoformat(d.pop("started_at"))

        status = StepStatus(d.pop("status"))

        def _parse_duration_ms(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        duration_ms = _parse_duration_ms(d.pop("duration_ms", UNSET))

        def _parse_error(data: object) -> None | StepError | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                error_type_0 = StepError.from_dict(data)

                return error_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | StepError | Unset, data)

        error = _parse_error(d.pop("error", UNSET))

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

        def _parse_observation(data: object) -> None | StepObservationType0 | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                observation_type_0 = StepObservationType0.from_dict(data)

                return observation_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | StepObservationType0 | Unset, data)

        observation = _parse_observation(d.pop("observation", UNSET))

        replayed = d.pop("replayed", UNSET)

        replays = d.pop("replays", UNSET)

        step = cls(
            action=action,
            args=args,
            index=index,
            request_hash=request_hash,
            started_at=started_at,
            status=status,
            duration_ms=duration_ms,
            error=error,
            finished_at=finished_at,
            observation=observation,
            replayed=replayed,
            replays=replays,
        )

        step.additional_properties = d
        return step

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
