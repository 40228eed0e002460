from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="StorageUsage")


@_attrs_define
class StorageUsage:
    """
    Attributes:
        layers (int):
        quota_bytes (int | None): Your storage quota (None: unlimited)
        used_bytes (int): Bytes of the distinct layer images you registered
    """

    layers: int
    quota_bytes: int | None
    used_bytes: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        layers = self.layers

        quota_bytes: int | None
        quota_bytes = self.quota_bytes

        used_bytes = self.used_bytes

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "layers": layers,
                "quota_bytes": quota_bytes,
                "used_bytes": used_bytes,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        layers = d.pop("layers")

        def _parse_quota_bytes(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        quota_bytes = _parse_quota_bytes(d.pop("quota_bytes"))

        used_bytes = d.pop("used_bytes")

        storage_usage = cls(
            layers=layers,
            quota_bytes=quota_bytes,
            used_bytes=used_bytes,
        )

        storage_usage.additional_properties = d
        return storage_usage

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
