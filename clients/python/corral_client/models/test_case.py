from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="TestCase")


@_attrs_define
class TestCase:
    """
    Attributes:
        expected_stdout (None | str | Unset): Compared with `compare`; omit to only run
        stdin (str | Unset):  Default: ''.
    """

    expected_stdout: None | str | Unset = UNSET
    stdin: str | Unset = ""
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        expected_stdout: None | str | Unset
        if isinstance(self.expected_stdout, Unset):
            expected_stdout = UNSET
        else:
            expected_stdout = self.expected_stdout

        stdin = self.stdin

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if expected_stdout is not UNSET:
            field_dict["expected_stdout"] = expected_stdout
        if stdin is not UNSET:
            field_dict["stdin"] = stdin

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)

        def _parse_expected_stdout(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        expected_stdout = _parse_expected_stdout(d.pop("expected_stdout", UNSET))

        stdin = d.pop("stdin", UNSET)

        test_case = cls(
            expected_stdout=expected_stdout,
            stdin=stdin,
        )

        test_case.additional_properties = d
        return test_case

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
