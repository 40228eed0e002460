from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="Node")


@_attrs_define
class Node:
    """A live node's capacity and what its sandboxes (every tenant's) hold of it. Its internal
    address is not shown: only the api talks to node-agents.

        Attributes:
            backends (list[str]):
            cpu (float):
            heartbeat_age_s (float): seconds since its last full heartbeat (capacity); over the heartbeat timeout when its
                agent is busy and only its liveness pulse keeps it live
            max_sandboxes (int):
            memory_mb (int):
            node_id (str):
            used_cpu (float):
            used_memory_mb (int):
            used_sandboxes (int):
            accelerator (str | Unset):  Default: ''.
            disk_mb (int | None | Unset): room for sandbox disks; null: the node does not count disk
            pids (int | None | Unset):
            used_disk_mb (int | Unset):  Default: 0.
            used_pids (int | Unset):  Default: 0.
    """

    backends: list[str]
    cpu: float
    heartbeat_age_s: float
    max_sandboxes: int
    memory_mb: int
    node_id: str
    used_cpu: float
    used_memory_mb: int
    used_sandboxes: int
    accelerator: str | Unset = ""
    disk_mb: int | None | Unset = UNSET
    pids: int | None | Unset = UNSET
    used_disk_mb: int | Unset = 0
    used_pids: int | Unset = 0
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        backends = self.backends

        cpu = self.cpu

        heartbeat_age_s = self.heartbeat_age_s

        max_sandboxes = self.max_sandboxes

        memory_mb = self.memory_mb

        node_id = self.node_id

        used_cpu = self.used_cpu

        used_memory_mb = self.used_memory_mb

        used_sandboxes = self.used_sandboxes

        accelerator = self.accelerator

        disk_mb: int | None | Unset
        if isinstance(self.disk_mb, Unset):
            disk_mb = UNSET
        else:
            disk_mb = self.disk_mb

        pids: int | None | Unset
        if isinstance(self.pids, Unset):
            pids = UNSET
        else:
            pids = self.pids

        used_disk_mb = self.used_disk_mb

        used_pids = self.used_pids

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "backends": backends,
                "cpu": cpu,
                "heartbeat_age_s": heartbeat_age_s,
                "max_sandboxes": max_sandboxes,
                "memory_mb": memory_mb,
                "node_id": node_id,
                "used_cpu": used_cpu,
                "used_memory_mb": used_memory_mb,
                "used_sandboxes": used_sandboxes,
            }
        )
        if accelerator is not UNSET:
            field_dict["accelerator"] = accelerator
        if disk_mb is not UNSET:
            field_dict["disk_mb"] = disk_mb
        if pids is not UNSET:
            field_dict["pids"] = pids
        if used_disk_mb is not UNSET:
            field_dict["used_disk_mb"] = used_disk_mb
        if used_pids is not UNSET:
            field_dict["used_pids"] = used_pids

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        backends = cast(list[str], d.pop("backends"))

        cpu = d.pop("cpu")

        heartbeat_age_s = d.pop("heartbeat_age_s")

        max_sandboxes = d.pop("max_sandboxes")

        memory_mb = d.pop("memory_mb")

        node_id = d.pop("node_id")

        used_cpu = d.pop("used_cpu")

        used_memory_mb = d.pop("used_memory_mb")

        used_sandboxes = d.pop("used_sandboxes")

        accelerator = d.pop("accelerator", UNSET)

        def _parse_disk_mb(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        disk_mb = _parse_disk_mb(d.pop("disk_mb", UNSET))

        def _parse_pids(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        pids = _parse_pids(d.pop("pids", UNSET))

        used_disk_mb = d.pop("used_disk_mb", UNSET)

        used_pids = d.pop("used_pids", UNSET)

        node = cls(
            backends=backends,
            cpu=cpu,
            heartbeat_age_s=heartbeat_age_s,
            max_sandboxes=max_sandboxes,
            memory_mb=memory_mb,
            node_id=node_id,
            used_cpu=used_cpu,
            used_memory_mb=used_memory_mb,
            used_sandboxes=used_sandboxes,
            accelerator=accelerator,
            disk_mb=disk_mb,
            pids=pids,
            used_disk_mb=used_disk_mb,
            used_pids=used_pids,
        )

        node.additional_properties = d
        return node

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
