from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="Requests")


@_attrs_define
class Requests:
    """What placement counts for a sandbox (Kubernetes' requests): the scheduler reserves these
    on a node, and the node's measured use keeps it honest (docs/architecture.md, "Capacity").
    The spec's cpu, memory_mb, disk_mb and pids_limit are its limits, which the node enforces;
    a request is at most its limit. Unset, each is the default for the sandbox's kind
    (``default_requests``), never above the limit.

        Attributes:
            cpu (float | None | Unset): CPU cores placement counts (default: 0.001)
            disk_mb (int | None | Unset): MiB of disk placement counts (default: 4)
            memory_mb (int | None | Unset): MiB placement counts (default: 2 for containers, memory_mb for VMs)
            pids (int | None | Unset): Tasks placement counts (default: 2; 32 for VMs)
    """

    cpu: float | None | Unset = UNSET
    disk_mb: int | None | Unset = UNSET
    memory_mb: int | None | Unset = UNSET
    pids: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        cpu: float | None | Unset
        if isinstance(self.cpu, Unset):
            cpu = UNSET
        else:
            cpu = self.cpu

        disk_mb: int | None | Unset
        if isinstance(self.disk_mb, Unset):
            disk_mb = UNSET
        else:
            disk_mb = self.disk_mb

        memory_mb: int | None | Unset
        if isinstance(self.memory_mb, Unset):
            memory_mb = UNSET
        else:
            memory_mb = self.memory_mb

        pids: int | None | Unset
        if isinstance(self.pids, Unset):
            pids = UNSET
        else:
            pids = self.pids

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if cpu is not UNSET:
            field_dict["cpu"] = cpu
        if disk_mb is not UNSET:
            field_dict["disk_mb"] = disk_mb
        if memory_mb is not UNSET:
            field_dict["memory_mb"] = memory_mb
        if pids is not UNSET:
            field_dict["pids"] = pids

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)

        def _parse_cpu(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        cpu = _parse_cpu(d.pop("cpu", UNSET))

        def _parse_disk_mb(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        disk_mb = _parse_disk_mb(d.pop("disk_mb", UNSET))

        def _parse_memory_mb(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        memory_mb = _parse_memory_mb(d.pop("memory_mb", UNSET))

        def _parse_pids(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        pids = _parse_pids(d.pop("pids", UNSET))

        requests = cls(
            cpu=cpu,
            disk_mb=disk_mb,
            memory_mb=memory_mb,
            pids=pids,
        )

        return requests
