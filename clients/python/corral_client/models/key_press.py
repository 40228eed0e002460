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

T = TypeVar("T", bound="KeyPress")


@_attrs_define
class KeyPress:
    """Press keys together, then release them (a chord: ["ctrl", "alt", "delete"]).
    Names are QEMU QKeyCode names: "a", "1", "ret", "spc", "esc", "tab", "backspace",
    "ctrl", "shift", "alt", "up", "f1"...

        Attributes:
            keys (list[str]):
            type_ (Literal['key'] | Unset):  Default: 'key'.
    """

    keys: list[str]
    type_: Literal["key"] | Unset = "key"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        keys = self.keys

        type_ = self.type_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "keys": keys,
            }
        )
        if type_ is not UNSET:
            field_dict["type"] = type_

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        keys = cast(list[str], d.pop("keys"))

        type_ = cast(Literal["key"] | Unset, d.pop("type", UNSET))
        if type_ != "key" and not isinstance(type_, Unset):
            raise ValueError(f"type must match const 'key', got '{type_}'")

        key_press = cls(
            keys=keys,
            type_=type_,
        )

        key_press.additional_properties = d
        return key_press

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
