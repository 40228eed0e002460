from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="Quotas")


@_attrs_define
class Quotas:
    """Per-tenant limits, checked at create; absent or null: unlimited.

    Attributes:
        max_cpu (float | None | Unset): CPU cores of live sandboxes together
        max_disk_mb (int | None | Unset): MiB of writable disk of live sandboxes together
        max_fncall_per_s (float | None | Unset): fncall calls per second
        max_image_bytes (int | None | Unset): Bytes of stored layer images
        max_memory_mb (int | None | Unset): MiB of memory of live sandboxes together
        max_sandboxes (int | None | Unset): Live sandboxes at once
    """

    max_cpu: float | None | Unset = UNSET
    max_disk_mb: int | None | Unset = UNSET
    max_fncall_per_s: float | None | Unset = UNSET
    max_image_bytes: int | None | Unset = UNSET
    max_memory_mb: int | None | Unset = UNSET
    max_sandboxes: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        max_cpu: float | None | Unset
        if isinstance(self.max_cpu, Unset):
            max_cpu = UNSET
        else:
            max_cpu = self.max_cpu

        max_disk_mb: int | None | Unset
        if isinstance(self.max_disk_mb, Unset):
            max_disk_mb = UNSET
        else:
            max_disk_mb = self.max_disk_mb

        max_fncall_per_s: float | None | Unset
        if isinstance(self.max_fncall_per_s, Unset):
            max_fncall_per_s = UNSET
        else:
            max_fncall_per_s = self.max_fncall_per_s

        max_image_bytes: int | None | Unset
        if isinstance(self.max_image_bytes, Unset):
            max_image_bytes = UNSET
        else:
            max_image_bytes = self.max_image_bytes

        max_memory_mb: int | None | Unset
        if isinstance(self.max_memory_mb, Unset):
            max_memory_mb = UNSET
        else:
            max_memory_mb = self.max_memory_mb

        max_sandboxes: int | None | Unset
        if isinstance(self.max_sandboxes, Unset):
            max_sandboxes = UNSET
        else:
            max_sandboxes = self.max_sandboxes

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if max_cpu is not UNSET:
            field_dict["max_cpu"] = max_cpu
        if max_disk_mb is not UNSET:
            field_dict["max_disk_mb"] = max_disk_mb
        if max_fncall_per_s is not UNSET:
            field_dict["max_fncall_per_s"] = max_fncall_per_s
        if max_image_bytes is not UNSET:
            field_dict["max_image_bytes"] = max_image_bytes
        if max_memory_mb is not UNSET:
            field_dict["max_memory_mb"] = max_memory_mb
        if max_sandboxes is not UNSET:
            field_dict["max_sandboxes"] = max_sandboxes

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)

        def _parse_max_cpu(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        max_cpu = _parse_max_cpu(d.pop("max_cpu", UNSET))

        def _parse_max_disk_mb(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_disk_mb = _parse_max_disk_mb(d.pop("max_disk_mb", UNSET))

        def _parse_max_fncall_per_s(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        max_fncall_per_s = _parse_max_fncall_per_s(d.pop("max_fncall_per_s", UNSET))

        def _parse_max_image_bytes(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_image_bytes = _parse_max_image_bytes(d.pop("max_image_bytes", UNSET))

        def _parse_max_memory_mb(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_memory_mb = _parse_max_memory_mb(d.pop("max_memory_mb", UNSET))

        def _parse_max_sandboxes(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_sandboxes = _parse_max_sandboxes(d.pop("max_sandboxes", UNSET))

        quotas = cls(
            max_cpu=max_cpu,
            max_disk_mb=max_disk_mb,
            max_fncall_per_s=max_fncall_per_s,
            max_image_bytes=max_image_bytes,
            max_memory_mb=max_memory_mb,
            max_sandboxes=max_sandboxes,
        )

        return quotas
