from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="TenantUsageNow")


@_attrs_define
class TenantUsageNow:
    """
    Attributes:
        cpu (float):
        disk_mb (int):
        image_bytes (int | None): Null when image-service could not be asked
        memory_mb (int):
        sandboxes (int):
    """

    cpu: float
    disk_mb: int
    image_bytes: int | None
    memory_mb: int
    sandboxes: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        cpu = self.cpu

        disk_mb = self.disk_mb

        image_bytes: int | None
        image_bytes = self.image_bytes

        memory_mb = self.memory_mb

        sandboxes = self.sandboxes

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "cpu": cpu,
                "disk_mb": disk_mb,
                "image_bytes": image_bytes,
                "memory_mb": memory_mb,
                "sandboxes": sandboxes,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        cpu = d.pop("cpu")

        disk_mb = d.pop("disk_mb")

        def _parse_image_bytes(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        image_bytes = _parse_image_bytes(d.pop("image_bytes"))

        memory_mb = d.pop("memory_mb")

        sandboxes = d.pop("sandboxes")

        tenant_usage_now = cls(
            cpu=cpu,
            disk_mb=disk_mb,
            image_bytes=image_bytes,
            memory_mb=memory_mb,
            sandboxes=sandboxes,
        )

        tenant_usage_now.additional_properties = d
        return tenant_usage_now

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
