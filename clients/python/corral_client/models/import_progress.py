from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="ImportProgress")


@_attrs_define
class ImportProgress:
    """
    Attributes:
        step (str): queued | pulling | unpacking | building | registering
        bytes_unpacked (int | Unset):  Default: 0.
        layers_done (int | Unset):  Default: 0.
        layers_total (int | Unset):  Default: 0.
    """

    step: str
    bytes_unpacked: int | Unset = 0
    layers_done: int | Unset = 0
    layers_total: int | Unset = 0
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        step = self.step

        bytes_unpacked = self.bytes_unpacked

        layers_done = self.layers_done

        layers_total = self.layers_total

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "step": step,
            }
        )
        if bytes_unpacked is not UNSET:
            field_dict["bytes_unpacked"] = bytes_unpacked
        if layers_done is not UNSET:
            field_dict["layers_done"] = layers_done
        if layers_total is not UNSET:
            field_dict["layers_total"] = layers_total

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        step = d.pop("step")

        bytes_unpacked = d.pop("bytes_unpacked", UNSET)

        layers_done = d.pop("layers_done", UNSET)

        layers_total = d.pop("layers_total", UNSET)

        import_progress = cls(
            step=step,
            bytes_unpacked=bytes_unpacked,
            layers_done=layers_done,
            layers_total=layers_total,
        )

        import_progress.additional_properties = d
        return import_progress

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
