from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.quotas import Quotas


T = TypeVar("T", bound="TenantCreate")


@_attrs_define
class TenantCreate:
    """
    Attributes:
        name (str):
        quotas (Quotas | Unset): Per-tenant limits, checked at create; absent or null: unlimited.
    """

    name: str
    quotas: Quotas | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        quotas: dict[str, Any] | Unset = UNSET
        if not isinstance(self.quotas, Unset):
            quotas = self.quotas.to_dict()

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "name": name,
            }
        )
        if quotas is not UNSET:
            field_dict["quotas"] = quotas

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.quotas import Quotas

        d = dict(src_dict)
        name = d.pop("name")

        _quotas = d.pop("quotas", UNSET)
        quotas: Quotas | Unset
        if isinstance(_quotas, Unset):
            quotas = UNSET
        else:
            quotas = Quotas.from_dict(_quotas)

        tenant_create = cls(
            name=name,
            quotas=quotas,
        )

        return tenant_create
