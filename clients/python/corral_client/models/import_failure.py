from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="ImportFailure")


@_attrs_define
class ImportFailure:
    """
    Attributes:
        code (str):
        message (str):
        status (int): The HTTP status this failure is (4xx: the image's fault)
        loc (list[int | str] | None | Unset):
    """

    code: str
    message: str
    status: int
    loc: list[int | str] | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        code = self.code

        message = self.message

        status = self.status

        loc: list[int | str] | None | Unset
        if isinstance(self.loc, Unset):
            loc = UNSET
        elif isinstance(self.loc, list):
            loc = []
            for loc_type_0_item_data in self.loc:
                loc_type_0_item: int | str
                loc_type_0_item = loc_type_0_item_data
                loc.append(loc_type_0_item)

        else:
            loc = self.loc

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "code": code,
                "message": message,
                "status": status,
            }
        )
        if loc is not UNSET:
            field_dict["loc"] = loc

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        code = d.pop("code")

        message = d.pop("message")

        status = d.pop("status")

        def _parse_loc(data: object) -> list[int | str] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                loc_type_0 = []
                _loc_type_0 = data
                for loc_type_0_item_data in _loc_type_0:

                    def _parse_loc_type_0_item(data: object) -> int | str:
                        return cast(int | str, data)

                    loc_type_0_item = _parse_loc_type_0_item(loc_type_0_item_data)

                    loc_type_0.append(loc_type_0_item)

                return loc_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[int | str] | None | Unset, data)

        loc = _parse_loc(d.pop("loc", UNSET))

        import_failure = cls(
            code=code,
            message=message,
            status=status,
            loc=loc,
        )

        import_failure.additional_properties = d
        return import_failure

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
