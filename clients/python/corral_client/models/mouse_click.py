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

from ..models.mouse_click_button import MouseClickButton
from ..types import UNSET, Unset

T = TypeVar("T", bound="MouseClick")


@_attrs_define
class MouseClick:
    """Click a button, at (x, y) when given (else where the pointer is).

    Attributes:
        button (MouseClickButton | Unset):  Default: MouseClickButton.LEFT.
        double (bool | Unset):  Default: False.
        type_ (Literal['click'] | Unset):  Default: 'click'.
        x (int | None | Unset):
        y (int | None | Unset):
    """

    button: MouseClickButton | Unset = MouseClickButton.LEFT
    double: bool | Unset = False
    type_: Literal["click"] | Unset = "click"
    x: int | None | Unset = UNSET
    y: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        button: str | Unset = UNSET
        if not isinstance(self.button, Unset):
            button = self.button.value

        double = self.double

        type_ = self.type_

        x: int | None | Unset
        if isinstance(self.x, Unset):
            x = UNSET
        else:
            x = self.x

        y: int | None | Unset
        if isinstance(self.y, Unset):
            y = UNSET
        else:
            y = self.y

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if button is not UNSET:
            field_dict["button"] = button
        if double is not UNSET:
            field_dict["double"] = double
        if type_ is not UNSET:
            field_dict["type"] = type_
        if x is not UNSET:
            field_dict["x"] = x
        if y is not UNSET:
            field_dict["y"] = y

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        _button = d.pop("button", UNSET)
        button: MouseClickButton | Unset
        if isinstance(_button, Unset):
            button = UNSET
        else:
            button = MouseClickButton(_button)

        double = d.pop("double", UNSET)

        type_ = cast(Literal["click"] | Unset, d.pop("type", UNSET))
        if type_ != "click" and not isinstance(type_, Unset):
            raise ValueError(f"type must match const 'click', got '{type_}'")

        def _parse_x(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        x = _parse_x(d.pop("x", UNSET))

        def _parse_y(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        y = _parse_y(d.pop("y", UNSET))

        mouse_click = cls(
            button=button,
            double=double,
            type_=type_,
            x=x,
            y=y,
        )

        mouse_click.additional_properties = d
        return mouse_click

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
