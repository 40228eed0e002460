from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="Snapshot")


@_attrs_define
class Snapshot:
    """A running VM's memory and disk state, saved on its node's disk.

    Attributes:
        backend (str):
        cpu (float):
        created_at (datetime.datetime):
        environment (str):
        id (str):
        memory_mb (int):
        node_id (str):
        sandbox_id (str):
        disk_image (None | str | Unset):
        size_bytes (int | Unset):  Default: 0.
    """

    backend: str
    cpu: float
    created_at: datetime.datetime
    environment: str
    id: str
    memory_mb: int
    node_id: str
    sandbox_id: str
    disk_image: None | str | Unset = UNSET
    size_bytes: int | Unset = 0
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        backend = self.backend

        cpu = self.cpu

        created_at = self.created_at.isoformat()

        environment = self.environment

        id = self.id

        memory_mb = self.memory_mb

        node_id = self.node_id

        sandbox_id = self.sandbox_id

        disk_image: None | str | Unset
        if isinstance(self.disk_image, Unset):
            disk_image = UNSET
        else:
            disk_image = self.disk_image

        size_bytes = self.size_bytes

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "backend": backend,
                "cpu": cpu,
                "created_at": created_at,
                "environment": environment,
                "id": id,
                "memory_mb": memory_mb,
                "node_id": node_id,
                "sandbox_id": sandbox_id,
            }
        )
        if disk_image is not UNSET:
            field_dict["disk_image"] = disk_image
        if size_bytes is not UNSET:
            field_dict["size_bytes"] = size_bytes

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        backend = d.pop("backend")

        cpu = d.pop("cpu")

        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        environment = d.pop("environment")

        id = d.pop("id")

        memory_mb = d.pop("memory_mb")

        node_id = d.pop("node_id")

        sandbox_id = d.pop("sandbox_id")

        def _parse_disk_image(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        disk_image = _parse_disk_image(d.pop("disk_image", UNSET))

        size_bytes = d.pop("size_bytes", UNSET)

        snapshot = cls(
            backend=backend,
            cpu=cpu,
            created_at=created_at,
            environment=environment,
            id=id,
            memory_mb=memory_mb,
            node_id=node_id,
            sandbox_id=sandbox_id,
            disk_image=disk_image,
            size_bytes=size_bytes,
        )

        snapshot.additional_properties = d
        return snapshot

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
