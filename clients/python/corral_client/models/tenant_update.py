from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.quotas import Quotas


T = TypeVar("T", bound="TenantUpdate")


@_attrs_define
class TenantUpdate:
    """Only the quotas given change (null: unlimited); ``disabled`` refuses every key of the tenant (401).

    Attributes:
        disabled (bool | None | Unset):
        quotas (None | Quotas | Unset):
    """

    disabled: bool | None | Unset = UNSET
    quotas: None | Quotas | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.quotas import Quotas

        disabled: bool | None | Unset
        if isinstance(self.disabled, Unset):
            disabled = UNSET
        else:
            disabled = self.disabled

        quotas: dict[str, Any] | None | Unset
        if isinstance(self.quotas, Unset):
            quotas = UNSET
        elif isinstance(self.quotas, Quotas):
            quotas = self.quotas.to_dict()
        else:
            quotas = self.quotas

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if disabled is not UNSET:
            field_dict["disabled"] = disabled
        if quotas is not UNSET:
            field_dict["quotas"] = quotas

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.quotas import Quotas

        d = dict(src_dict)

        def _parse_disabled(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        disabled = _parse_disabled(d.pop("disabled", UNSET))

        def _parse_quotas(data: object) -> None | Quotas | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                quotas_type_0 = Quotas.from_dict(data)

                return quotas_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Quotas | Unset, data)

        quotas = _parse_quotas(d.pop("quotas", UNSET))

        tenant_update = cls(
            disabled=disabled,
            quotas=quotas,
        )

        return tenant_update
