from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.layer_kind import LayerKind

T = TypeVar("T", bound="Layer")


@_attrs_define
class Layer:
    """
    Attributes:
        created_at (datetime.datetime):
        digest (str): sha256 of the EROFS image: identical content has one digest, stored once
        kind (LayerKind):
        name (str):
        ref (str): name:version
        shared (bool): From the operator's shared catalogue (read-only to tenants)
        size (int):
        version (str):
    """

    created_at: datetime.datetime
    digest: str
    kind: LayerKind
    name: str
    ref: str
    shared: bool
    size: int
    version: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        created_at = self.created_at.isoformat()

        digest = self.digest

        kind = self.kind.value

        name = self.name

        ref = self.ref

        shared = self.shared

        size = self.size

        version = self.version

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "created_at": created_at,
                "digest": digest,
                "kind": kind,
                "name": name,
                "ref": ref,
                "shared": shared,
                "size": size,
                "version": version,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))

        digest = d.pop("digest")

        kind = LayerKind(d.pop("kind"))

        name = d.pop("name")

        ref = d.pop("ref")

        shared = d.pop("shared")

        size = d.pop("size")

        version = d.pop("version")

        layer = cls(
            created_at=created_at,
            digest=digest,
            kind=kind,
            name=name,
            ref=ref,
            shared=shared,
            size=size,
            version=version,
        )

        layer.additional_properties = d
        return layer

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
