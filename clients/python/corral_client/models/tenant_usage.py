from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.tenant_usage_now import TenantUsageNow
    from ..models.tenant_usage_totals import TenantUsageTotals


T = TypeVar("T", bound="TenantUsage")


@_attrs_define
class TenantUsage:
    """
    Attributes:
        current (TenantUsageNow):
        tenant (str):
        totals (TenantUsageTotals): Of the tenant's ended sandboxes (billing): wall time × what each asked for.
    """

    current: TenantUsageNow
    tenant: str
    totals: TenantUsageTotals
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        current = self.current.to_dict()

        tenant = self.tenant

        totals = self.totals.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "current": current,
                "tenant": tenant,
                "totals": totals,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.tenant_usage_now import TenantUsageNow
        from ..models.tenant_usage_totals import TenantUsageTotals

        d = dict(src_dict)
        current = TenantUsageNow.from_dict(d.pop("current"))

        tenant = d.pop("tenant")

        totals = TenantUsageTotals.from_dict(d.pop("totals"))

        tenant_usage = cls(
            current=current,
            tenant=tenant,
            totals=totals,
        )

        tenant_usage.additional_properties = d
        return tenant_usage

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
