from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.step_request_action import StepRequestAction
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.step_request_args import StepRequestArgs


T = TypeVar("T", bound="StepRequest")


@_attrs_define
class StepRequest:
    """Body of ``POST /v1/rollouts/{id}/steps``.

    Attributes:
        action (StepRequestAction):
        index (int): 0-based; the next index, or one already committed (replay)
        args (StepRequestArgs | Unset): ExecRequest for exec; {path, content, encoding, mode} for write_file; {path,
            max_bytes} for read_file; {path} for list_files
    """

    action: StepRequestAction
    index: int
    args: StepRequestArgs | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        action = self.action.value

        index = self.index

        args: dict[str, Any] | Unset = UNSET
        if not isinstance(self.args, Unset):
            args = self.args.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "action": action,
                "index": index,
            }
        )
        if args is not UNSET:
            field_dict["args"] = args

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.step_request_args import StepRequestArgs

        d = dict(src_dict)
        action = StepRequestAction(d.pop("action"))

        index = d.pop("index")

        _args = d.pop("args", UNSET)
        args: StepRequestArgs | Unset
        if isinstance(_args, Unset):
            args = UNSET
        else:
            args = StepRequestArgs.from_dict(_args)

        step_request = cls(
            action=action,
            index=index,
            args=args,
        )

        step_request.additional_properties = d
        return step_request

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
