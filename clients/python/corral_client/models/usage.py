from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="Usage")


@_attrs_define
class Usage:
    """
    Attributes:
        cpu_seconds (float | Unset):  Default: 0.0.
        disk_used_bytes (int | Unset):  Default: 0.
        memory_mib_seconds (float | Unset):  Default: 0.0.
        network_denied (int | Unset):  Default: 0.
        network_rx_bytes (int | Unset):  Default: 0.
        network_tx_bytes (int | Unset):  Default: 0.
        oom_kills (int | Unset):  Default: 0.
        peak_memory_bytes (int | Unset):  Default: 0.
        peak_working_set_bytes (int | Unset):  Default: 0.
        swap_bytes (int | Unset):  Default: 0.
        wall_time_s (float | Unset):  Default: 0.0.
        working_set_bytes (int | Unset):  Default: 0.
    """

    cpu_seconds: float | Unset = 0.0
    disk_used_bytes: int | Unset = 0
    memory_mib_seconds: float | Unset = 0.0
    network_denied: int | Unset = 0
    network_rx_bytes: int | Unset = 0
    network_tx_bytes: int | Unset = 0
    oom_kills: int | Unset = 0
    peak_memory_bytes: int | Unset = 0
    peak_working_set_bytes: int | Unset = 0
    swap_bytes: int | Unset = 0
    wall_time_s: float | Unset = 0.0
    working_set_bytes: int | Unset = 0
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        cpu_seconds = self.cpu_seconds

        disk_used_bytes = self.disk_used_bytes

        memory_mib_seconds = self.memory_mib_seconds

        network_denied = self.network_denied

        network_rx_bytes = self.network_rx_bytes

        network_tx_bytes = self.network_tx_bytes

        oom_kills = self.oom_kills

        peak_memory_bytes = self.peak_memory_bytes

        peak_working_set_bytes = self.peak_working_set_bytes

        swap_bytes = self.swap_bytes

        wall_time_s = self.wall_time_s

        working_set_bytes = self.working_set_bytes

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if cpu_seconds is not UNSET:
            field_dict["cpu_seconds"] = cpu_seconds
        if disk_used_bytes is not UNSET:
            field_dict["disk_used_bytes"] = disk_used_bytes
        if memory_mib_seconds is not UNSET:
            field_dict["memory_mib_seconds"] = memory_mib_seconds
        if network_denied is not UNSET:
            field_dict["network_denied"] = network_denied
        if network_rx_bytes is not UNSET:
            field_dict["network_rx_bytes"] = network_rx_bytes
        if network_tx_bytes is not UNSET:
            field_dict["network_tx_bytes"] = network_tx_bytes
        if oom_kills is not UNSET:
            field_dict["oom_kills"] = oom_kills
        if peak_memory_bytes is not UNSET:
            field_dict["peak_memory_bytes"] = peak_memory_bytes
        if peak_working_set_bytes is not UNSET:
            field_dict["peak_working_set_bytes"] = peak_working_set_bytes
        if swap_bytes is not UNSET:
            field_dict["swap_bytes"] = swap_bytes
        if wall_time_s is not UNSET:
            field_dict["wall_time_s"] = wall_time_s
        if working_set_bytes is not UNSET:
            field_dict["working_set_bytes"] = working_set_bytes

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        cpu_seconds = d.pop("cpu_seconds", UNSET)

        disk_used_bytes = d.pop("disk_used_bytes", UNSET)

        memory_mib_seconds = d.pop("memory_mib_seconds", UNSET)

        network_denied = d.pop("network_denied", UNSET)

        network_rx_bytes = d.pop("network_rx_bytes", UNSET)

        network_tx_bytes = d.pop("network_tx_bytes", UNSET)

        oom_kills = d.pop("oom_kills", UNSET)

        peak_memory_bytes = d.pop("peak_memory_bytes", UNSET)

        peak_working_set_bytes = d.pop("peak_working_set_bytes", UNSET)

        swap_bytes = d.pop("swap_bytes", UNSET)

        wall_time_s = d.pop("wall_time_s", UNSET)

        working_set_bytes = d.pop("working_set_bytes", UNSET)

        usage = cls(
            cpu_seconds=cpu_seconds,
            disk_used_bytes=disk_used_bytes,
            memory_mib_seconds=memory_mib_seconds,
            network_denied=network_denied,
            network_rx_bytes=network_rx_bytes,
            network_tx_bytes=network_tx_bytes,
            oom_kills=oom_kills,
            peak_memory_bytes=peak_memory_bytes,
            peak_working_set_bytes=peak_working_set_bytes,
            swap_bytes=swap_bytes,
            wall_time_s=wall_time_s,
            working_set_bytes=working_set_bytes,
        )

        usage.additional_properties = d
        return usage

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
