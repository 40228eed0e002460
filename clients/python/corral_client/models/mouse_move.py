from __future__ import annotations

from collections.abc import Mapping
from typing import (
    Any,
    Literal,
    Self,
    TypeVar,
    cast,
)

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="MouseMove")


@_attrs_define
class MouseMove:
    """Move the pointer to an absolute position in screen pixels.

    Attributes:
        x (int):
        y (int):
        type_ (Literal['mouse_move'] | Unset):  Default: 'mouse_move'.
    """

    x: int
    y: int
    type_: Literal["mouse_move"] | Unset = "mouse_move"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        x = self.x

        y = self.y

        type_ = self.type_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "x": x,
                "y": y,
            }
        )
        if type_ is not UNSET:
            field_dict["type"] = type_

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        x = d.pop("x")

        y = d.pop("y")

        type_ = cast(Literal["mouse_move"] | Unset, d.pop("type", UNSET))
        if type_ != "mouse_move" and not isinstance(type_, Unset):
            raise ValueError(f"type must match const 'mouse_move', got '{type_}'")

        mouse_move = cls(
            x=x,
            y=y,
            type_=type_,
        )

        mouse_move.additional_properties = d
        return mouse_move

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
