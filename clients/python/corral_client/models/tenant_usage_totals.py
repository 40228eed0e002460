from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="TenantUsageTotals")


@_attrs_define
class TenantUsageTotals:
    """Of the tenant's ended sandboxes (billing): wall time × what each asked for.

    Attributes:
        cpu_s (float): CPU seconds used
        memory_mb_s (float): MiB·s: memory asked for × wall time
        sandbox_hours (float):
        sandboxes_ended (int):
    """

    cpu_s: float
    memory_mb_s: float
    sandbox_hours: float
    sandboxes_ended: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        cpu_s = self.cpu_s

        memory_mb_s = self.memory_mb_s

        sandbox_hours = self.sandbox_hours

        sandboxes_ended = self.sandboxes_ended

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "cpu_s": cpu_s,
                "memory_mb_s": memory_mb_s,
                "sandbox_hours": sandbox_hours,
                "sandboxes_ended": sandboxes_ended,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        cpu_s = d.pop("cpu_s")

        memory_mb_s = d.pop("memory_mb_s")

        sandbox_hours = d.pop("sandbox_hours")

        sandboxes_ended = d.pop("sandboxes_ended")

        tenant_usage_totals = cls(
            cpu_s=cpu_s,
            memory_mb_s=memory_mb_s,
            sandbox_hours=sandbox_hours,
            sandboxes_ended=sandboxes_ended,
        )

        tenant_usage_totals.additional_properties = d
        return tenant_usage_totals

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
