from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="RuntimeInfo")


@_attrs_define
class RuntimeInfo:
    """
    Attributes:
        compiled (bool):
        name (str):
        queue_depth (int | None | Unset):
    """

    compiled: bool
    name: str
    queue_depth: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        compiled = self.compiled

        name = self.name

        queue_depth: int | None | Unset
        if isinstance(self.queue_depth, Unset):
            queue_depth = UNSET
        else:
            queue_depth = self.queue_depth

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "compiled": compiled,
                "name": name,
            }
        )
        if queue_depth is not UNSET:
            field_dict["queue_depth"] = queue_depth

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        compiled = d.pop("compiled")

        name = d.pop("name")

        def _parse_queue_depth(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        queue_depth = _parse_queue_depth(d.pop("queue_depth", UNSET))

        runtime_info = cls(
            compiled=compiled,
            name=name,
            queue_depth=queue_depth,
        )

        runtime_info.additional_properties = d
        return runtime_info

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
