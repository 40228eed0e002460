from __future__ import annotations

from collections.abc import Mapping
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    Self,
    TypeVar,
    cast,
)

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.network_counters import NetworkCounters
    from ..models.network_denial import NetworkDenial
    from ..models.network_policy import NetworkPolicy


T = TypeVar("T", bound="SandboxNetworkState")


@_attrs_define
class SandboxNetworkState:
    """
    Attributes:
        network (Literal['none'] | NetworkPolicy):
        counters (NetworkCounters | Unset):
        denied (list[NetworkDenial] | Unset): The latest refusals, oldest first
    """

    network: Literal["none"] | NetworkPolicy
    counters: NetworkCounters | Unset = UNSET
    denied: list[NetworkDenial] | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.network_policy import NetworkPolicy

        network: dict[str, Any] | Literal["none"]
        if isinstance(self.network, NetworkPolicy):
            network = self.network.to_dict()
        else:
            network = self.network

        counters: dict[str, Any] | Unset = UNSET
        if not isinstance(self.counters, Unset):
            counters = self.counters.to_dict()

        denied: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.denied, Unset):
            denied = []
            for denied_item_data in self.denied:
                denied_item = denied_item_data.to_dict()
                denied.append(denied_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "network": network,
            }
        )
        if counters is not UNSET:
            field_dict["counters"] = counters
        if denied is not UNSET:
            field_dict["denied"] = denied

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.network_counters import NetworkCounters
        from ..models.network_denial import NetworkDenial
        from ..models.network_policy import NetworkPolicy

        d = dict(src_dict)

        def _parse_network(data: object) -> Literal["none"] | NetworkPolicy:
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                network_type_0 = NetworkPolicy.from_dict(data)

                return network_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            network_type_1 = cast(Literal["none"], data)
            if network_type_1 != "none":
                raise ValueError(
                    f"network_type_1 must match const 'none', got '{network_type_1}'"
                )
            return network_type_1

        network = _parse_network(d.pop("network"))

        _counters = d.pop("counters", UNSET)
        counters: NetworkCounters | Unset
        if isinstance(_counters, Unset):
            counters = UNSET
        else:
            counters = NetworkCounters.from_dict(_counters)

        _denied = d.pop("denied", UNSET)
        denied: list[NetworkDenial] | Unset = UNSET
        if _denied is not UNSET:
            denied = []
            for denied_item_data in _denied:
                denied_item = NetworkDenial.from_dict(denied_item_data)

                denied.append(denied_item)

        sandbox_network_state = cls(
            network=network,
            counters=counters,
            denied=denied,
        )

        sandbox_network_state.additional_properties = d
        return sandbox_network_state

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
