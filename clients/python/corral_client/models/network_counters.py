from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="NetworkCounters")


@_attrs_define
class NetworkCounters:
    """
    Attributes:
        denied (int | Unset):  Default: 0.
        rx_bytes (int | Unset):  Default: 0.
        tx_bytes (int | Unset):  Default: 0.
    """

    denied: int | Unset = 0
    rx_bytes: int | Unset = 0
    tx_bytes: int | Unset = 0
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        denied = self.denied

        rx_bytes = self.rx_bytes

        tx_bytes = self.tx_bytes

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if denied is not UNSET:
            field_dict["denied"] = denied
        if rx_bytes is not UNSET:
            field_dict["rx_bytes"] = rx_bytes
        if tx_bytes is not UNSET:
            field_dict["tx_bytes"] = tx_bytes

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        denied = d.pop("denied", UNSET)

        rx_bytes = d.pop("rx_bytes", UNSET)

        tx_bytes = d.pop("tx_bytes", UNSET)

        network_counters = cls(
            denied=denied,
            rx_bytes=rx_bytes,
            tx_bytes=tx_bytes,
        )

        network_counters.additional_properties = d
        return network_counters

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
