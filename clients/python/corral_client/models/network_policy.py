from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="NetworkPolicy")


@_attrs_define
class NetworkPolicy:
    """An allowlist: everything else stays closed (DNS answers NXDOMAIN, connections are refused).

    Attributes:
        allow (list[str] | Unset): Rules: 'host.example', '*.example' (below it), '10.0.0.0/24' or '10.0.0.5', each
            optionally ':443' or ':80,8000-8100'
        bandwidth_mbit (int | None | Unset): Cap on each direction, in Mbit/s
        presets (list[str] | Unset): Names of the operator's presets (CORRAL_NETWORK_PRESETS)
    """

    allow: list[str] | Unset = UNSET
    bandwidth_mbit: int | None | Unset = UNSET
    presets: list[str] | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        allow: list[str] | Unset = UNSET
        if not isinstance(self.allow, Unset):
            allow = self.allow

        bandwidth_mbit: int | None | Unset
        if isinstance(self.bandwidth_mbit, Unset):
            bandwidth_mbit = UNSET
        else:
            bandwidth_mbit = self.bandwidth_mbit

        presets: list[str] | Unset = UNSET
        if not isinstance(self.presets, Unset):
            presets = self.presets

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if allow is not UNSET:
            field_dict["allow"] = allow
        if bandwidth_mbit is not UNSET:
            field_dict["bandwidth_mbit"] = bandwidth_mbit
        if presets is not UNSET:
            field_dict["presets"] = presets

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        allow = cast(list[str], d.pop("allow", UNSET))

        def _parse_bandwidth_mbit(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        bandwidth_mbit = _parse_bandwidth_mbit(d.pop("bandwidth_mbit", UNSET))

        presets = cast(list[str], d.pop("presets", UNSET))

        network_policy = cls(
            allow=allow,
            bandwidth_mbit=bandwidth_mbit,
            presets=presets,
        )

        return network_policy
