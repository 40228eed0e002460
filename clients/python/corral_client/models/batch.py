from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.batch_status import BatchStatus
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.batch_verdicts import BatchVerdicts


T = TypeVar("T", bound="Batch")


@_attrs_define
class Batch:
    """
    Attributes:
        completed (int):
        id (str):
        status (BatchStatus):
        total (int):
        verdicts (BatchVerdicts | Unset): Overall verdicts of the completed calls
    """

    completed: int
    id: str
    status: BatchStatus
    total: int
    verdicts: BatchVerdicts | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        completed = self.completed

        id = self.id

        status = self.status.value

        total = self.total

        verdicts: dict[str, Any] | Unset = UNSET
        if not isinstance(self.verdicts, Unset):
            verdicts = self.verdicts.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "completed": completed,
                "id": id,
                "status": status,
                "total": total,
            }
        )
        if verdicts is not UNSET:
            field_dict["verdicts"] = verdicts

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.batch_verdicts import BatchVerdicts

        d = dict(src_dict)
        completed = d.pop("completed")

        id = d.pop("id")

        status = BatchStatus(d.pop("status"))

        total = d.pop("total")

        _verdicts = d.pop("verdicts", UNSET)
        verdicts: BatchVerdicts | Unset
        if isinstance(_verdicts, Unset):
            verdicts = UNSET
        else:
            verdicts = BatchVerdicts.from_dict(_verdicts)

        batch = cls(
            completed=completed,
            id=id,
            status=status,
            total=total,
            verdicts=verdicts,
        )

        batch.additional_properties = d
        return batch

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
