from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.environment_layer_kind import EnvironmentLayerKind

T = TypeVar("T", bound="EnvironmentLayer")


@_attrs_define
class EnvironmentLayer:
    """
    Attributes:
        digest (str):
        kind (EnvironmentLayerKind):
        name (str):
        size (int):
        version (str):
    """

    digest: str
    kind: EnvironmentLayerKind
    name: str
    size: int
    version: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        digest = self.digest

        kind = self.kind.value

        name = self.name

        size = self.size

        version = self.version

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "digest": digest,
                "kind": kind,
                "name": name,
                "size": size,
                "version": version,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        digest = d.pop("digest")

        kind = EnvironmentLayerKind(d.pop("kind"))

        name = d.pop("name")

        size = d.pop("size")

        version = d.pop("version")

        environment_layer = cls(
            digest=digest,
            kind=kind,
            name=name,
            size=size,
            version=version,
        )

        environment_layer.additional_properties = d
        return environment_layer

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
