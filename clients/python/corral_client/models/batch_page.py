from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.batch_status import BatchStatus
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.batch_item import BatchItem
    from ..models.batch_page_verdicts import BatchPageVerdicts


T = TypeVar("T", bound="BatchPage")


@_attrs_define
class BatchPage:
    """
    Attributes:
        completed (int):
        id (str):
        next_offset (int): Offset of the next page (results are in completion order)
        offset (int):
        results (list[BatchItem]):
        status (BatchStatus):
        total (int):
        verdicts (BatchPageVerdicts | Unset): Overall verdicts of the completed calls
    """

    completed: int
    id: str
    next_offset: int
    offset: int
    results: list[BatchItem]
    status: BatchStatus
    total: int
    verdicts: BatchPageVerdicts | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        completed = self.completed

        id = self.id

        next_offset = self.next_offset

        offset = self.offset

        results = []
        for results_item_data in self.results:
            results_item = results_item_data.to_dict()
            results.append(results_item)

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
                "next_offset": next_offset,
                "offset": offset,
                "results": results,
                "status": status,
                "total": total,
            }
        )
        if verdicts is not UNSET:
            field_dict["verdicts"] = verdicts

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.batch_item import BatchItem
        from ..models.batch_page_verdicts import BatchPageVerdicts

        d = dict(src_dict)
        completed = d.pop("completed")

        id = d.pop("id")

        next_offset = d.pop("next_offset")

        offset = d.pop("offset")

        results = []
        _results = d.pop("results")
        for results_item_data in _results:
            results_item = BatchItem.from_dict(results_item_data)

            results.append(results_item)

        status = BatchStatus(d.pop("status"))

        total = d.pop("total")

        _verdicts = d.pop("verdicts", UNSET)
        verdicts: BatchPageVerdicts | Unset
        if isinstance(_verdicts, Unset):
            verdicts = UNSET
        else:
            verdicts = BatchPageVerdicts.from_dict(_verdicts)

        batch_page = cls(
            completed=completed,
            id=id,
            next_offset=next_offset,
            offset=offset,
            results=results,
            status=status,
            total=total,
            verdicts=verdicts,
        )

        batch_page.additional_properties = d
        return batch_page

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
