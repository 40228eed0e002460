from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.file_info_type import FileInfoType

T = TypeVar("T", bound="FileInfo")


@_attrs_define
class FileInfo:
    """
    Attributes:
        mode (int):
        mtime (float):
        name (str):
        path (str):
        size (int):
        type_ (FileInfoType):
    """

    mode: int
    mtime: float
    name: str
    path: str
    size: int
    type_: FileInfoType
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        mode = self.mode

        mtime = self.mtime

        name = self.name

        path = self.path

        size = self.size

        type_ = self.type_.value

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "mode": mode,
                "mtime": mtime,
                "name": name,
                "path": path,
                "size": size,
                "type": type_,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        mode = d.pop("mode")

        mtime = d.pop("mtime")

        name = d.pop("name")

        path = d.pop("path")

        size = d.pop("size")

        type_ = FileInfoType(d.pop("type"))

        file_info = cls(
            mode=mode,
            mtime=mtime,
            name=name,
            path=path,
            size=size,
            type_=type_,
        )

        file_info.additional_properties = d
        return file_info

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
