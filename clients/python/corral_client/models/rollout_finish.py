from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.rollout_finish_info import RolloutFinishInfo


T = TypeVar("T", bound="RolloutFinish")


@_attrs_define
class RolloutFinish:
    """
    Attributes:
        info (RolloutFinishInfo | Unset):
        keep_sandbox (bool | None | Unset): Default: delete the sandbox if the rollout created it, keep (and resume) it
            if it was given
        reward (float | None | Unset):
    """

    info: RolloutFinishInfo | Unset = UNSET
    keep_sandbox: bool | None | Unset = UNSET
    reward: float | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        info: dict[str, Any] | Unset = UNSET
        if not isinstance(self.info, Unset):
            info = self.info.to_dict()

        keep_sandbox: bool | None | Unset
        if isinstance(self.keep_sandbox, Unset):
            keep_sandbox = UNSET
        else:
            keep_sandbox = self.keep_sandbox

        reward: float | None | Unset
        if isinstance(self.reward, Unset):
            reward = UNSET
        else:
            reward = self.reward

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if info is not UNSET:
            field_dict["info"] = info
        if keep_sandbox is not UNSET:
            field_dict["keep_sandbox"] = keep_sandbox
        if reward is not UNSET:
            field_dict["reward"] = reward

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.rollout_finish_info import RolloutFinishInfo

        d = dict(src_dict)
        _info = d.pop("info", UNSET)
        info: RolloutFinishInfo | Unset
        if isinstance(_info, Unset):
            info = UNSET
        else:
            info = RolloutFinishInfo.from_dict(_info)

        def _parse_keep_sandbox(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        keep_sandbox = _parse_keep_sandbox(d.pop("keep_sandbox", UNSET))

        def _parse_reward(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        reward = _parse_reward(d.pop("reward", UNSET))

        rollout_finish = cls(
            info=info,
            keep_sandbox=keep_sandbox,
            reward=reward,
        )

        rollout_finish.additional_properties = d
        return rollout_finish

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
